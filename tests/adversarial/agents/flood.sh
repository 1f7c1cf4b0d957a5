#!/bin/sh
# Gigabytes on stdout and stderr at the same time.
head -c 1073741824 /dev/zero &
head -c 536870912 /dev/zero >&2
wait
