"""One module per `aisia` sub-command, each with add_arguments(parser) and run(args) -> int."""
