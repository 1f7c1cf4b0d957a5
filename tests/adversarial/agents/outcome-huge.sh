#!/bin/sh
# A 5 MiB outcome record (valid JSON) claiming success.
{ printf '{"schema_version":"aworld.run.outcome.v1","semantic_status":"succeeded","padding":"'
  head -c 5242880 /dev/zero | tr '\0' a
  printf '"}'; } > /logs/agent/outcome.json
