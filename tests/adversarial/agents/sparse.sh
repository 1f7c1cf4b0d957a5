#!/bin/sh
# Sparse-file disk bomb: costs the agent nothing, but a `docker commit` of it writes every
# byte to the host's disk. Exits at once, before any periodic check could see it.
truncate -s 4G /app/sparse
echo 42 > /app/answer
