#!/usr/bin/env bash
# Runs a command against a real Apache Kafka (KRaft) started on 127.0.0.1 for the occasion.
#
#   kfaketest/realkafka/run.sh [--brokers N] [--] COMMAND [ARGS...]
#
# It fetches org.apache.kafka:kafka_2.13 ($TIDEMARK_KAFKA_VERSION, 4.4.0) and its runtime
# dependencies with Maven into a cache outside the repository ($TIDEMARK_KAFKA_CACHE, by default
# ~/.cache/tidemark-kafka/VERSION; reused when present), formats KRaft storage, starts N combined
# broker+controller nodes (1 by default; 3 for rebalance and leader-move runs, topics then get
# replication factor 3) on free loopback ports, waits until they serve produce, transactions and
# group coordinators, exports KAFKA_BROKERS and runs COMMAND. The brokers are stopped when it
# ends, on failure and on INT/TERM too. Logs and data go to a temporary directory that is
# printed, and kept, when anything fails (TIDEMARK_KAFKA_KEEP=1 keeps it always).
#
# Exit status: COMMAND's. If the broker cannot be obtained (no Java 17+, no Maven, Maven Central
# unreachable) it exits 2, or, with TIDEMARK_KAFKA_OPTIONAL=1 (what CI sets), prints one line
# "realkafka: real-broker suite SKIPPED: <why>" and exits 0. A broker that was obtained but does
# not start is a failure (exit 1) either way.
#
# Environment: TIDEMARK_KAFKA_VERSION, TIDEMARK_KAFKA_CACHE, TIDEMARK_KAFKA_OPTIONAL,
# TIDEMARK_KAFKA_KEEP, TIDEMARK_KAFKA_HEAP (JVM heap per node, "-Xms512m -Xmx512m"), JAVA (the
# java binary; else $JAVA_HOME/bin/java, else java on PATH), MVN (else mvn on PATH), GO (go).
set -euo pipefail

VERSION=${TIDEMARK_KAFKA_VERSION:-4.4.0}
SCALA=2.13
CACHE=${TIDEMARK_KAFKA_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/tidemark-kafka/$VERSION}
DEP_PLUGIN=org.apache.maven.plugins:maven-dependency-plugin:3.8.1
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
GO=${GO:-go}

say() { echo "realkafka: $*" >&2; }
die() { say "FAILED: $*"; exit 1; }

# unavailable WHY: the broker cannot be obtained on this machine.
unavailable() {
	if [[ -n ${TIDEMARK_KAFKA_OPTIONAL:-} ]]; then
		echo "realkafka: real-broker suite SKIPPED: $* (Kafka $VERSION could not be obtained; set up Java 17+ and Maven with access to Maven Central to run it)"
		exit 0
	fi
	say "cannot obtain Kafka $VERSION: $*"
	exit 2
}

nodes=1
while [[ $# -gt 0 ]]; do
	case $1 in
	--brokers) nodes=$2; shift 2 ;;
	--brokers=*) nodes=${1#*=}; shift ;;
	--) shift; break ;;
	-*) die "unknown flag $1 (usage: run.sh [--brokers N] [--] COMMAND [ARGS...])" ;;
	*) break ;;
	esac
done
[[ $# -gt 0 ]] || die "no command (usage: run.sh [--brokers N] [--] COMMAND [ARGS...])"
[[ $nodes =~ ^[1-9]$ ]] || die "--brokers wants 1..9, got $nodes"

# --- Java 17+ -------------------------------------------------------------------------------------
JAVA=${JAVA:-}
if [[ -z $JAVA ]]; then
	if [[ -n ${JAVA_HOME:-} && -x $JAVA_HOME/bin/java ]]; then JAVA=$JAVA_HOME/bin/java; else JAVA=$(command -v java || true); fi
fi
[[ -n $JAVA ]] || unavailable "no java on PATH"
java_given=$JAVA
[[ -x $JAVA ]] || JAVA=$(command -v "$JAVA" || true)
[[ -n $JAVA ]] || unavailable "$java_given is not an executable java"
jv=$("$JAVA" -version 2>&1 | sed -n 's/.*version "\([0-9][0-9]*\).*/\1/p' | head -1 || true)
[[ -n $jv && $jv -ge 17 ]] || unavailable "Kafka $VERSION needs Java 17+, $JAVA is ${jv:-unknown}"

# --- Kafka's jars, cached outside the repository ------------------------------------------------------
LIB=$CACHE/lib
fetch() {
	[[ -f $LIB/.complete ]] && return 0
	local mvn=${MVN:-$(command -v mvn || true)}
	[[ -n $mvn ]] || unavailable "no mvn on PATH to fetch Kafka's jars"
	local work=$CACHE/fetch.$$
	rm -rf "$CACHE"/fetch.* && mkdir -p "$work/lib" # earlier failed fetches' leftovers go
	cat >"$work/pom.xml" <<-EOF
		<project xmlns="http://maven.apache.org/POM/4.0.0">
		  <modelVersion>4.0.0</modelVersion>
		  <groupId>io.tidemark.realkafka</groupId>
		  <artifactId>kafka-broker</artifactId>
		  <version>$VERSION</version>
		  <packaging>pom</packaging>
		  <dependencies>
		    <dependency><groupId>org.apache.kafka</groupId><artifactId>kafka_$SCALA</artifactId><version>$VERSION</version></dependency>
		    <!-- Kafka logs through SLF4J 1.7; this routes it to log4j-core, which kafka_$SCALA brings -->
		    <dependency><groupId>org.apache.logging.log4j</groupId><artifactId>log4j-slf4j-impl</artifactId><version>2.25.5</version><scope>runtime</scope></dependency>
		  </dependencies>
		</project>
	EOF
	say "fetching Kafka $VERSION with Maven into $CACHE (once) ..."
	local t0=$SECONDS
	if ! (cd "$work" && "$mvn" -B -q -Dmaven.repo.local="$CACHE/m2" \
		"$DEP_PLUGIN:copy-dependencies" -DincludeScope=runtime -DoutputDirectory="$work/lib" >"$work/mvn.log" 2>&1); then
		tail -n 15 "$work/mvn.log" | sed 's/^/  mvn: /' >&2
		unavailable "Maven could not fetch org.apache.kafka:kafka_$SCALA:$VERSION (log: $work/mvn.log)"
	fi
	ls "$work/lib"/kafka_$SCALA-"$VERSION".jar >/dev/null 2>&1 || die "Maven ran but kafka_$SCALA-$VERSION.jar is missing (log: $work/mvn.log)"
	touch "$work/lib/.complete"
	rm -rf "$LIB" && mv "$work/lib" "$LIB" && rm -rf "$work"
	say "fetched $(ls "$LIB" | wc -l) jars in $((SECONDS - t0))s"
}
mkdir -p "$CACHE" || unavailable "cannot create the cache $CACHE"
if command -v flock >/dev/null; then
	exec 9>"$CACHE/.lock"
	flock 9 # one fetch at a time; concurrent runs wait and reuse it
	fetch
	flock -u 9
else
	fetch
fi

# --- the run's directory, the helper, cleanup ----------------------------------------------------------
RUN=$(mktemp -d "${TMPDIR:-/tmp}/tidemark-kafka.XXXXXX")
pids=()
cmdpid=
failed=1
cleanup() {
	local rc=$?
	trap - EXIT INT TERM
	[[ -n $cmdpid ]] && kill -TERM -- "-$cmdpid" 2>/dev/null || true # the command's process group
	if ((${#pids[@]})); then
		kill -TERM "${pids[@]}" 2>/dev/null || true
		for _ in $(seq 50); do # up to 5s for a clean stop, then SIGKILL
			local alive=0
			for p in "${pids[@]}"; do kill -0 "$p" 2>/dev/null && alive=1; done
			((alive)) || break
			sleep 0.1
		done
		kill -KILL "${pids[@]}" 2>/dev/null || true
		wait "${pids[@]}" 2>/dev/null || true
	fi
	if ((failed || rc != 0)) || [[ -n ${TIDEMARK_KAFKA_KEEP:-} ]]; then
		say "broker logs and data kept in $RUN (node*/server.log, node*/stdout)"
	else
		rm -rf "$RUN"
	fi
	exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

TOOL=$RUN/realkafka
(cd "$ROOT" && "$GO" build -o "$TOOL" ./kfaketest/realkafka) || die "cannot build the helper (go build ./kfaketest/realkafka)"

# --- format and start ---------------------------------------------------------------------------------
HEAP=${TIDEMARK_KAFKA_HEAP:-"-Xms512m -Xmx512m"}
rf=$((nodes < 3 ? nodes : 3))
isr=$((rf > 1 ? rf - 1 : 1))

# start_nodes: one attempt on fresh ports; returns 1 if a node lost its port to someone else.
start_nodes() {
	local -a ports
	mapfile -t ports < <("$TOOL" ports $((2 * nodes)))
	((${#ports[@]} == 2 * nodes)) || die "could not pick free ports"
	voters= brokers=
	for i in $(seq 1 "$nodes"); do
		voters+="${voters:+,}$i@127.0.0.1:${ports[2 * i - 1]}"
		brokers+="${brokers:+,}127.0.0.1:${ports[2 * i - 2]}"
	done
	local cid
	cid=$(head -c 16 /dev/urandom | base64 | tr '+/' '-_' | tr -d '=') # a Kafka Uuid; it may start with "-", hence --cluster-id=
	rm -rf "$RUN"/node*
	for i in $(seq 1 "$nodes"); do
		local d=$RUN/node$i bport=${ports[2 * i - 2]} cport=${ports[2 * i - 1]}
		mkdir -p "$d/data"
		cat >"$d/server.properties" <<-EOF
			process.roles=broker,controller
			node.id=$i
			controller.quorum.voters=$voters
			listeners=PLAINTEXT://127.0.0.1:$bport,CONTROLLER://127.0.0.1:$cport
			advertised.listeners=PLAINTEXT://127.0.0.1:$bport
			controller.listener.names=CONTROLLER
			inter.broker.listener.name=PLAINTEXT
			listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT
			log.dirs=$d/data
			num.partitions=1
			default.replication.factor=$rf
			min.insync.replicas=$isr
			auto.create.topics.enable=false
			delete.topic.enable=true
			offsets.topic.replication.factor=$rf
			offsets.topic.num.partitions=10
			transaction.state.log.replication.factor=$rf
			transaction.state.log.min.isr=$isr
			transaction.state.log.num.partitions=10
			share.coordinator.state.topic.replication.factor=$rf
			share.coordinator.state.topic.min.isr=$isr
			group.initial.rebalance.delay.ms=0
			group.min.session.timeout.ms=500
			num.network.threads=2
			num.io.threads=4
			num.recovery.threads.per.data.dir=1
			log.retention.check.interval.ms=600000
		EOF
		cat >"$d/log4j2.properties" <<-EOF
			status = warn
			appender.file.type = File
			appender.file.name = FILE
			appender.file.fileName = $d/server.log
			appender.file.layout.type = PatternLayout
			appender.file.layout.pattern = [%d] %p %m (%c)%n
			rootLogger.level = INFO
			rootLogger.appenderRef.file.ref = FILE
			logger.kafka.name = kafka
			logger.kafka.level = INFO
			logger.state.name = state.change.logger
			logger.state.level = WARN
		EOF
	done
	local -a fpids=()
	for i in $(seq 1 "$nodes"); do # format in parallel: a JVM start each
		local d=$RUN/node$i
		"$JAVA" -Xmx256m -Dlog4j2.configurationFile="$d/log4j2.properties" -cp "$LIB/*" kafka.tools.StorageTool \
			format --cluster-id="$cid" -c "$d/server.properties" >"$d/format.log" 2>&1 &
		fpids+=($!)
	done
	for i in $(seq 1 "$nodes"); do
		wait "${fpids[i - 1]}" || { cat "$RUN/node$i/format.log" >&2; die "formatting node $i's storage failed"; }
	done
	pids=()
	for i in $(seq 1 "$nodes"); do
		local d=$RUN/node$i
		# shellcheck disable=SC2086 # HEAP is a list of options
		"$JAVA" $HEAP -XX:+UseG1GC -XX:MaxGCPauseMillis=20 -Djava.awt.headless=true \
			-Dlog4j2.configurationFile="$d/log4j2.properties" -cp "$LIB/*" kafka.Kafka "$d/server.properties" \
			>"$d/stdout" 2>&1 &
		pids+=($!)
	done
	# ready: every broker registered, then a warm-up (topic, transaction, group commit); a node
	# that dies first ends the wait at once
	"$TOOL" ready -n "$nodes" -timeout 120s "$brokers" >"$RUN/ready.log" 2>&1 &
	local rp=$! dead=
	while kill -0 "$rp" 2>/dev/null; do
		for i in $(seq 1 "$nodes"); do
			if ! kill -0 "${pids[i - 1]}" 2>/dev/null; then dead=$i; fi
		done
		[[ -z $dead ]] || break
		sleep 0.2
	done
	if [[ -n $dead ]]; then
		kill "$rp" 2>/dev/null || true
		wait "$rp" 2>/dev/null || true
		kill -KILL "${pids[@]}" 2>/dev/null || true
		wait "${pids[@]}" 2>/dev/null || true
		pids=()
		if grep -qs 'Address already in use' "$RUN/node$dead/server.log" "$RUN/node$dead/stdout"; then
			return 1
		fi
		tail -n 30 "$RUN/node$dead/server.log" "$RUN/node$dead/stdout" >&2 || true
		die "node $dead exited while starting"
	fi
	wait "$rp" || { cat "$RUN/ready.log" >&2; die "the brokers did not become ready within 120s"; }
}

t0=$SECONDS
for attempt in 1 2 3; do
	if start_nodes; then break; fi
	((attempt < 3)) || die "could not bind free ports three times"
	say "a port was taken before the broker bound it; retrying on new ports"
done
say "Kafka $VERSION: $nodes node(s) ready at $brokers in $((SECONDS - t0))s (logs: $RUN)"

# --- the command ---------------------------------------------------------------------------------------
export KAFKA_BROKERS=$brokers
export TIDEMARK_KAFKA_LOGS=$RUN
set +e
setsid "$@" & # its own process group, so an INT or TERM here stops it and its children
cmdpid=$!
wait "$cmdpid"
rc=$?
cmdpid=
set -e
failed=$((rc != 0))
exit "$rc"
