from imagenet_cog.cli import main

raise SystemExit(main())
