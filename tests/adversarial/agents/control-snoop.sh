#!/bin/sh
# Run as the "work" of an aworld agent: plant a unique marker in this trial's control root,
# wait for the sibling trial to do the same, then search everything reachable for markers and
# for any way to the Docker engine.
marker="control-marker-$(cat /proc/sys/kernel/random/uuid)"
echo "$marker" > "$AWORLD_CONTROL_ROOT/marker.txt"
sleep 3
grep -rhos 'control-marker-[0-9a-f][0-9a-f-]*' / --exclude-dir=proc --exclude-dir=sys --exclude-dir=logs 2>/dev/null | sort -u > /logs/agent/markers.txt
ls -a "$AWORLD_CONTROL_ROOT/.." > /logs/agent/control-parent.txt 2>&1
{
  ls -la /var/run/docker.sock /run/docker.sock /var/run/docker /run/containerd 2>/dev/null
  find / -xdev -type s 2>/dev/null
  grep -i 'docker.sock\|containerd' /proc/self/mountinfo
  env | grep -i '^DOCKER'
} > /logs/agent/docker.txt
if (echo > /dev/tcp/127.0.0.1/2375) 2>/dev/null; then echo "tcp 127.0.0.1:2375 open" >> /logs/agent/docker.txt; fi
