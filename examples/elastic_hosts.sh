#!/bin/sh
# Host discovery for elastic jobs: prints the hosts that may run workers now, one `host` or `host:slots`
# per line. The launcher runs it every second. This one reads the list from a file, which the demo
# (examples/elastic_demo.py) edits during training; on a cluster it would ask the scheduler instead.
exec cat "${ELASTIC_HOSTS_FILE:?set ELASTIC_HOSTS_FILE to a file listing one host per line}"
