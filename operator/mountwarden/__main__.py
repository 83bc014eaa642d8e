from mountwarden.cli import main

main()
