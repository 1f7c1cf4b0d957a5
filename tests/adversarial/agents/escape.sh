#!/bin/sh
# Symlinks, hard links, fifos and `..` everywhere arbiter copies files from: artifacts, the
# declared deliverable, the paths a completion record names. $HOST_SENTINEL is the absolute
# path of a file on the host that must never be read or written through any of them.
mkdir -p /app/dir/sub
echo ok > /app/dir/ok.txt
ln -s / /app/dir/root
ln -s ../../../../../../../.. /app/dir/up
ln -s "$HOST_SENTINEL" /app/dir/host
ln -s "$(dirname "$HOST_SENTINEL")" /app/dir/sub/hostdir
ln /app/dir/ok.txt /app/dir/hard
mkfifo /app/dir/fifo
ln -s "$HOST_SENTINEL" /app/link
ln -s /etc/passwd /app/out.md
cat > /logs/agent/completion.json <<JSON
{"goal": {"deliverable": "/app/out.md", "operation": "write"},
 "attempts": [
   {"command": "cp", "exit_code": 0, "produced": "/app/../etc/passwd", "for_goal": "/app/out.md"},
   {"command": "cp", "exit_code": 0, "produced": "../../host", "for_goal": "/app/out.md"},
   {"command": "cp", "exit_code": 0, "produced": "/app/dir/host", "for_goal": "/app/out.md"}
 ],
 "status": "completed"}
JSON
printf '%s' '{"schema_version":"aworld.run.outcome.v1","semantic_status":"succeeded","process_exit_code":0,"trajectory_fidelity":"complete","llm_call_count":0,"tool_call_count":0,"action_count":0,"last_successful_checkpoint":null}' > /logs/agent/outcome.json
