#!/bin/bash
# Every SECONDS (default 15) until killed: each Spark driver JVM's RSS and anonymous memory, and its Native Memory
# Tracking summary (`jcmd PID VM.native_memory summary`), appended to F. The drivers need
# -XX:NativeMemoryTracking=summary (SWITCHYARD_JVM_OPTIONS). A sample whose anonymous memory is above SPIKE_MB (env,
# default 3000) also lists the driver's largest anonymous mappings (from /proc/PID/smaps: a Java heap is one large
# mapping, glibc's malloc arenas are 64 MB each, a large malloc or direct buffer a mapping of its own size).
# Usage: benchmarks/native_memory_poll.sh F [SECONDS] &  (docs/performance.md, "Where the peak lies")
out=$1; every=${2:-15}; spike_kb=$(( ${SPIKE_MB:-3000} * 1024 )); : > "$out"
while true; do
  for pid in $(pgrep -f "org.apache.spark.deploy.SparkSubmit"); do
    rss=$(awk '/VmRSS/{print $2}' /proc/$pid/status 2>/dev/null)
    anon=$(awk '/RssAnon/{print $2}' /proc/$pid/status 2>/dev/null)
    echo "=== $(date +%s) pid=$pid rss_kb=$rss anon_kb=$anon" >> "$out"
    jcmd $pid VM.native_memory summary 2>/dev/null | grep -E "^Total|^-" >> "$out"
    if [ -n "$anon" ] && [ "$anon" -gt "$spike_kb" ]; then
      # each unnamed mapping's resident anonymous kB, its size kB and its address range: the largest 15
      awk '/^[0-9a-f]+-[0-9a-f]+ /{path=$6; range=$1} /^Size:/{size=$2}
           /^Anonymous:/{if (path == "" && $2 > 0) print $2, size, range}' "/proc/$pid/smaps" 2>/dev/null \
        | sort -rn | head -15 | sed 's/^/  anon_mapping anon_kb size_kb range: /' >> "$out"
    fi
  done
  sleep "$every"
done
