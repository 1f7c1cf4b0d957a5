#!/bin/sh
# Try to reach the outside in a no-network task. Public addresses only (never private ranges).
out=/logs/agent/net.txt
: > "$out"
try() { name=$1; shift; if "$@" >/dev/null 2>&1; then echo "$name reached" >> "$out"; else echo "$name failed" >> "$out"; fi; }
try tcp-1.1.1.1:80 nc -w 3 1.1.1.1 80 </dev/null
try tcp-8.8.8.8:53 nc -w 3 8.8.8.8 53 </dev/null
try dns-example.com nslookup example.com
try http-example.com wget -q -T 3 -O /dev/null http://example.com/
try ping-1.1.1.1 ping -c 1 -W 2 1.1.1.1
ls /sys/class/net > /logs/agent/interfaces.txt
grep -v '^Iface' /proc/net/route > /logs/agent/routes.txt
echo 42 > /app/answer
