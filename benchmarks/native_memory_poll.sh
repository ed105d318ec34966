#!/bin/bash
# Every 15 s until killed: each Spark driver JVM's RSS and anonymous memory, and its Native Memory Tracking summary
# (`jcmd PID VM.native_memory summary`), appended to F. The drivers need -XX:NativeMemoryTracking=summary
# (SWITCHYARD_JVM_OPTIONS). Usage: benchmarks/native_memory_poll.sh F &  (docs/performance.md, "Where the peak lies")
out=$1; : > "$out"
while true; do
  for pid in $(pgrep -f "org.apache.spark.deploy.SparkSubmit"); do
    rss=$(awk '/VmRSS/{print $2}' /proc/$pid/status 2>/dev/null)
    anon=$(awk '/RssAnon/{print $2}' /proc/$pid/status 2>/dev/null)
    echo "=== $(date +%s) pid=$pid rss_kb=$rss anon_kb=$anon" >> "$out"
    jcmd $pid VM.native_memory summary 2>/dev/null | grep -E "^Total|^-" >> "$out"
  done
  sleep 15
done
