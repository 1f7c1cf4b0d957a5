#!/bin/sh
# Puts every secret it was given everywhere arbiter copies from: stdout, stderr, the outcome
# record, a stderr outcome marker, the completion record, artifact contents and file names,
# log directory names. Then lingers, so that host argv can be scanned meanwhile.
for s in "$SECRET_TOKEN" "$API_KEY" "$DERIVED"; do
  echo "leaking $s"
  echo "leaking $s" >&2
done
mkdir -p "/app/loot/$SECRET_TOKEN" "/logs/agent/$API_KEY"
echo "$SECRET_TOKEN $API_KEY $DERIVED" > "/app/loot/$SECRET_TOKEN.txt"
echo "$DERIVED" > "/app/loot/$SECRET_TOKEN/inner-$API_KEY.txt"
echo "$SECRET_TOKEN" > "/logs/agent/$API_KEY/note.txt"
printf '{"schema_version":"aworld.run.outcome.v1","semantic_status":"succeeded","process_exit_code":0,"trajectory_fidelity":"complete","llm_call_count":0,"tool_call_count":0,"action_count":0,"last_successful_checkpoint":null,"final_answer":"%s","%s":"%s"}' "$SECRET_TOKEN" "$API_KEY" "$DERIVED" > /logs/agent/outcome.json
echo "AWORLD_RUN_OUTCOME={\"semantic_status\":\"succeeded\",\"leak\":\"$SECRET_TOKEN\"}" >&2
printf '{"goal":{"deliverable":"/app/loot/%s.txt","operation":"write"},"attempts":[{"command":"echo %s","exit_code":0,"produced":"/app/loot/%s.txt","for_goal":"/app/loot/%s.txt"}],"status":"completed"}' "$SECRET_TOKEN" "$API_KEY" "$SECRET_TOKEN" "$SECRET_TOKEN" > /logs/agent/completion.json
sleep 3
