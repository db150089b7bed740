from bridge.cli import app

app(prog_name="toolbridge")
