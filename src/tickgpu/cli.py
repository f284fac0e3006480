"""PLACEHOLDER: replaced by the CLI."""
def main(argv=None):
    raise SystemExit("tickgpu CLI not built yet")
