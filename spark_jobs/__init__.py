"""Spark entry points of the auditor: extract_* (read), pure transform_*, load_* (write), main()."""
