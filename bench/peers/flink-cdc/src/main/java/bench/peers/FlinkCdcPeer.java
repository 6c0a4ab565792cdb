package bench.peers;

import java.util.HashMap;
import java.util.Locale;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;
import org.apache.flink.api.common.eventtime.WatermarkStrategy;
import org.apache.flink.api.common.typeinfo.TypeInformation;
import org.apache.flink.api.common.typeinfo.Types;
import org.apache.flink.cdc.connectors.mysql.source.MySqlSource;
import org.apache.flink.cdc.connectors.mysql.table.StartupOptions;
import org.apache.flink.cdc.debezium.DebeziumDeserializationSchema;
import org.apache.flink.core.execution.JobClient;
import org.apache.flink.streaming.api.environment.StreamExecutionEnvironment;
import org.apache.flink.streaming.api.functions.sink.SinkFunction;
import org.apache.flink.util.Collector;
import org.apache.kafka.connect.source.SourceRecord;

/**
 * Flink CDC's MySQL source (binlog only, from a given file and position) in a local
 * mini-cluster of parallelism 1, into a sink that counts and discards, until it has seen a given
 * number of row change records. Ends with one line {@code PEER_RESULT {...}} on stdout.
 */
public final class FlinkCdcPeer {
    // The mini-cluster runs the job in this JVM and class loader: the sink reports here.
    static final AtomicLong SEEN = new AtomicLong();
    static final CountDownLatch DONE = new CountDownLatch(1);
    static volatile long began;
    static volatile long firstRow;
    static volatile long rows;

    public static void main(String[] argv) throws Exception {
        began = System.nanoTime();
        HashMap<String, String> args = parse(argv);
        rows = Long.parseLong(need(args, "rows"));
        String password = System.getenv(need(args, "password-env"));
        if (password == null) {
            throw new IllegalArgumentException("environment variable " + args.get("password-env") + " is not set");
        }
        MySqlSource<Long> source = MySqlSource.<Long>builder()
                .hostname(need(args, "host"))
                .port(Integer.parseInt(need(args, "port")))
                .username(need(args, "user"))
                .password(password)
                .serverId(args.getOrDefault("server-id", "5201"))
                .databaseList(args.getOrDefault("database", "bench"))
                .tableList(args.getOrDefault("database", "bench") + "\\..*")
                .startupOptions(StartupOptions.specificOffset(need(args, "file"), Long.parseLong(need(args, "pos"))))
                .deserializer(new RowMarker())
                .build();
        StreamExecutionEnvironment env = StreamExecutionEnvironment.getExecutionEnvironment();
        env.setParallelism(1);
        env.fromSource(source, WatermarkStrategy.noWatermarks(), "mysql-cdc").addSink(new CountingSink());
        JobClient job = env.executeAsync("peer-flink-cdc");
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(Long.parseLong(args.getOrDefault("timeout", "1800")));
        boolean finished = false;
        while (!finished && System.nanoTime() < deadline) {
            finished = DONE.await(1, TimeUnit.SECONDS);
            if (!finished && job.getJobStatus().get().isGloballyTerminalState()) {
                System.err.println("the Flink job ended before all rows: " + job.getJobStatus().get());
                break;
            }
        }
        double elapsed = (System.nanoTime() - began) / 1e9;
        System.out.printf(Locale.ROOT,
                "PEER_RESULT {\"peer\": \"flink-cdc\", \"rows\": %d, \"elapsed_s\": %.3f, \"first_row_s\": %.3f, \"complete\": %b}%n",
                SEEN.get(), elapsed, firstRow / 1e9, finished);
        System.out.flush();
        try {
            job.cancel().get(30, TimeUnit.SECONDS);
        } finally {
            System.exit(finished ? 0 : 3);
        }
    }

    /** One element per row change record (a Debezium envelope with an {@code op}); nothing else. */
    static final class RowMarker implements DebeziumDeserializationSchema<Long> {
        @Override
        public void deserialize(SourceRecord record, Collector<Long> out) {
            if (record.valueSchema() != null && record.valueSchema().field("op") != null) {
                out.collect(1L);
            }
        }

        @Override
        public TypeInformation<Long> getProducedType() {
            return Types.LONG;
        }
    }

    /** Counts and discards. */
    static final class CountingSink implements SinkFunction<Long> {
        @Override
        public void invoke(Long value, Context context) {
            long n = SEEN.incrementAndGet();
            if (n == 1) {
                firstRow = System.nanoTime() - began;
            }
            if (n == rows) {
                DONE.countDown();
            }
        }
    }

    private static HashMap<String, String> parse(String[] argv) {
        HashMap<String, String> args = new HashMap<>();
        for (int i = 0; i + 1 < argv.length; i += 2) {
            if (!argv[i].startsWith("--")) {
                throw new IllegalArgumentException("expected --name value, got " + argv[i]);
            }
            args.put(argv[i].substring(2), argv[i + 1]);
        }
        return args;
    }

    private static String need(HashMap<String, String> args, String name) {
        String value = args.get(name);
        if (value == null) {
            throw new IllegalArgumentException("missing --" + name);
        }
        return value;
    }
}
