from tokendrop.cli import run

run()
