"""File and terminal helpers the rest of the package stands on: atomic writes, standard-stream
handling, text checks, the processor's features and signal handling. Nothing here knows about models."""
