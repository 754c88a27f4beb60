from kaleido_hw.cli import main


raise SystemExit(main())
