#!/bin/sh
# Replace the agent log directory arbiter collects by a symlink to the container's root,
# and the outcome record by a symlink to a secret-looking file.
rm -rf /logs/agent
ln -s / /logs/agent
echo 42 > /app/answer
