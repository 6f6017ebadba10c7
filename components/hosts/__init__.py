"""How a script reaches a host: the SSH runner every host step goes through (`remote.py`) and the shell
helpers sent ahead of every host script (`lib.sh`; snippets some scripts include, `include/`)."""
