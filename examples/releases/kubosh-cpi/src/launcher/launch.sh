#!/bin/sh
# launch KUBOSH CONFIG: runs kubosh's local cloud as a CPI (one request on stdin, one
# response on stdout) with the rendered configuration.
set -eu
kubosh=$1
config=$2
exec "$kubosh" cpi --config "$config"
