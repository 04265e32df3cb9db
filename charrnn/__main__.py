from charrnn.cli import main

main()
