#!/bin/sh
# 200k nested arrays: a parser without a depth limit overflows its stack.
{ head -c 200000 /dev/zero | tr '\0' '['; head -c 200000 /dev/zero | tr '\0' ']'; } > /logs/agent/outcome.json
