#!/bin/bash
# Issue 20 item 3 (bench/results/2026-11-27-leader-encode.md): one leader-mode run of
# `redstalk-bench solo`, on a private redis-server (AOF everysec), natively or under
# callgrind. Run from the repository root after `cargo build --release`.
# usage: measure.sh BIN LABEL MODE(callgrind|native) N [SIZE]
# callgrind: leader under valgrind, solo -c 10 -s SIZE --jobs N, prints total Ir.
# native: leader native, solo -c 10 -s SIZE --jobs N; prints Redis CPU (user+sys) per job and cmds/job.
BIN=$1; LABEL=$2; MODE=$3; N=$4; SIZE=${5:-16}
BENCH=${BENCH:-target/release/redstalk-bench}
D=${OUT:-/tmp}/run-$LABEL-$MODE-$N-$SIZE; rm -rf $D; mkdir -p $D
fp() { python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])'; }
RP=$(fp); BP=$(fp)
redis-server --port $RP --bind 127.0.0.1 --dir $D --save '' --appendonly yes --appendfsync everysec --daemonize yes --pidfile $D/redis.pid --logfile $D/redis.log
for i in $(seq 50); do redis-cli -p $RP ping >/dev/null 2>&1 && break; sleep 0.1; done
if [ $MODE = callgrind ]; then
  valgrind --tool=callgrind --callgrind-out-file=$D/cg.out $BIN -l 127.0.0.1 -p $BP --redis redis://127.0.0.1:$RP/0 --redis-prefix bench --redis-mode leader > $D/server.log 2>&1 &
else
  $BIN -l 127.0.0.1 -p $BP --redis redis://127.0.0.1:$RP/0 --redis-prefix bench --redis-mode leader > $D/server.log 2>&1 &
fi
SP=$!
for i in $(seq 300); do (echo > /dev/tcp/127.0.0.1/$BP) 2>/dev/null && break; sleep 0.2; done
sleep 1
redis-cli -p $RP config resetstat >/dev/null
pcpu() { awk '{print $14+$15}' /proc/$SP/stat; }
p0=$(pcpu)
c0=$(redis-cli -p $RP info cpu | awk -F: '/used_cpu_(sys|user):/{s+=$2} END{printf "%.6f", s}')
$BENCH solo -a 127.0.0.1:$BP -c ${CONNS:-10} -s $SIZE --jobs $N > $D/bench.out 2>&1 || echo "BENCH FAILED $?"
p1=$(pcpu)
c1=$(redis-cli -p $RP info cpu | awk -F: '/used_cpu_(sys|user):/{s+=$2} END{printf "%.6f", s}')
calls=$(redis-cli -p $RP info commandstats | tr -d '\r' | awk -F'[=,:]' '/^cmdstat_/{c+=$3} END{print c}')
evalsha=$(redis-cli -p $RP info commandstats | tr -d '\r' | grep cmdstat_evalsha)
kill -TERM $SP; wait $SP
redis-cli -p $RP shutdown nosave >/dev/null 2>&1
jobs=$(grep -o "jobs/s[^,]*" $D/bench.out | head -1)
if [ $MODE = callgrind ]; then
  ir=$(grep -m1 '^summary:\|^totals:' $D/cg.out | awk '{print $2}')
  echo "$LABEL callgrind N=$N size=$SIZE Ir=$ir redis_cpu_us_per_job=$(python3 -c "print(round(($c1-$c0)*1e6/$N,2))") cmds/job=$(python3 -c "print(round($calls/$N,2))") $evalsha"
else
  echo "$LABEL native N=$N size=$SIZE redstalk_cpu_us_per_job=$(python3 -c "print(round(($p1-$p0)*1e4/$N,1))") redis_cpu_us_per_job=$(python3 -c "print(round(($c1-$c0)*1e6/$N,2))") cmds/job=$(python3 -c "print(round($calls/$N,2))") $evalsha | $(grep -i 'jobs/s' $D/bench.out | head -2 | tr '\n' ' ')"
fi
