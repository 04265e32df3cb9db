from charrnn.cli.main import main

main()
