#!/bin/sh
# A well-behaved agent, run beside the hostile ones.
touch /app/before
echo 42 > /app/answer
sleep 2
