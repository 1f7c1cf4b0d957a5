#!/bin/sh
# Claims success without doing the work (/app/answer stays unset).
printf '%s' '{"schema_version":"aworld.run.outcome.v1","semantic_status":"succeeded","process_exit_code":0,"trajectory_fidelity":"complete","llm_call_count":3,"tool_call_count":2,"action_count":2,"last_successful_checkpoint":null}' > /logs/agent/outcome.json
