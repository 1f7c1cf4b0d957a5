#!/bin/sh
# Fork bomb: leave proof of life, then fork without end. The pids limit must hold, the
# deadline must still fire (SIGTERM cannot even be delivered by a fresh `kill` process once
# the table is full, so the container is killed after the grace period).
touch /app/before
# The bomb goes off in one child, so that this shell's own single fork cannot fail.
sh -c 'b() { b | b & }; b' &
while :; do :; done
