from pulsys.cli import main

raise SystemExit(main())
