from ralph.cli import main

main()
