from charrnn.cli import cli

cli(prog_name="charrnn")
