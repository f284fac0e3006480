"""Finance operations users call directly: checks, then dispatch, then a backend."""
