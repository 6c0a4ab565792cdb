package bench.peers;

import io.debezium.embedded.Connect;
import io.debezium.engine.ChangeEvent;
import io.debezium.engine.DebeziumEngine;
import io.debezium.engine.RecordChangeEvent;
import io.debezium.engine.format.ChangeEventFormat;
import io.debezium.engine.format.Json;
import java.io.BufferedWriter;
import java.io.IOException;
import java.io.ObjectOutputStream;
import java.io.OutputStream;
import java.io.UncheckedIOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.HashMap;
import java.util.List;
import java.util.Locale;
import java.util.Properties;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;
import org.apache.kafka.connect.source.SourceRecord;

/**
 * Debezium's embedded engine with its MariaDB connector, started at a given binlog file and
 * position, until it has seen a given number of row change records.
 *
 * <p>Consumers: {@code count} counts the records (Kafka Connect objects, nothing serialised),
 * {@code file} serialises each record to JSON and appends it to a file, flushed once a batch
 * before the batch is marked processed (the nearest peer of a durable sink). Offsets go to a
 * file. Ends with one line {@code PEER_RESULT {...}} on stdout.
 */
public final class DebeziumPeer {
    private static final String ENGINE = "peer-debezium";
    private static final String PREFIX = "bench";

    public static void main(String[] argv) throws Exception {
        long began = System.nanoTime();
        Args args = Args.parse(argv);
        Path work = Path.of(args.get("work"));
        Files.createDirectories(work);
        Path offsets = work.resolve("offsets.dat");
        writeStartOffset(offsets, args.get("file"), Long.parseLong(args.get("pos")), args.get("gtids"));

        long rows = Long.parseLong(args.get("rows"));
        String mode = args.get("mode");
        AtomicLong seen = new AtomicLong();
        long[] firstRow = {0};
        CountDownLatch done = new CountDownLatch(1);
        String[] failure = {null};
        DebeziumEngine.CompletionCallback stopped = (success, message, error) -> {
            if (!success) {
                failure[0] = message;
            }
            done.countDown();
        };
        Properties props = properties(args, work, offsets);
        ExecutorService executor = Executors.newSingleThreadExecutor();
        DebeziumEngine<?> engine;
        BufferedWriter out = null;
        if (mode.equals("count")) {
            engine = DebeziumEngine.create(ChangeEventFormat.of(Connect.class))
                    .using(props)
                    .using(stopped)
                    .notifying((List<RecordChangeEvent<SourceRecord>> batch,
                            DebeziumEngine.RecordCommitter<RecordChangeEvent<SourceRecord>> committer) -> {
                        for (RecordChangeEvent<SourceRecord> event : batch) {
                            SourceRecord record = event.record();
                            if (record.value() != null && isRowTopic(record.topic())) {
                                count(seen, rows, firstRow, began, done);
                            }
                            committer.markProcessed(event);
                        }
                        committer.markBatchFinished();
                    })
                    .build();
        } else if (mode.equals("file")) {
            BufferedWriter writer = Files.newBufferedWriter(Path.of(args.get("out")), StandardCharsets.UTF_8);
            out = writer;
            engine = DebeziumEngine.create(Json.class)
                    .using(props)
                    .using(stopped)
                    .notifying((List<ChangeEvent<String, String>> batch,
                            DebeziumEngine.RecordCommitter<ChangeEvent<String, String>> committer) -> {
                        long counted = 0;
                        try {
                            for (ChangeEvent<String, String> event : batch) {
                                if (event.value() != null && isRowTopic(event.destination())) {
                                    writer.write(event.value());
                                    writer.write('\n');
                                    counted++;
                                }
                            }
                            writer.flush();
                        } catch (IOException e) {
                            throw new UncheckedIOException(e);
                        }
                        for (long i = 0; i < counted; i++) {
                            count(seen, rows, firstRow, began, done);
                        }
                        for (ChangeEvent<String, String> event : batch) {
                            committer.markProcessed(event);
                        }
                        committer.markBatchFinished();
                    })
                    .build();
        } else {
            throw new IllegalArgumentException("--mode is count or file, not " + mode);
        }
        executor.execute(engine);
        boolean complete = false;
        try {
            done.await(Long.parseLong(args.getOr("timeout", "1800")), TimeUnit.SECONDS);
            complete = seen.get() >= rows;
            double elapsed = (System.nanoTime() - began) / 1e9;
            System.out.printf(Locale.ROOT,
                    "PEER_RESULT {\"peer\": \"debezium-%s\", \"rows\": %d, \"elapsed_s\": %.3f, \"first_row_s\": %.3f, \"complete\": %b}%n",
                    mode, seen.get(), elapsed, firstRow[0] / 1e9, complete);
            System.out.flush();
            if (failure[0] != null) {
                System.err.println("debezium engine stopped: " + failure[0]);
            }
            engine.close();
            executor.shutdown();
            executor.awaitTermination(30, TimeUnit.SECONDS);
            if (out != null) {
                out.close();
            }
        } finally {
            System.exit(complete ? 0 : 3);
        }
    }

    private static void count(AtomicLong seen, long rows, long[] firstRow, long began, CountDownLatch done) {
        long n = seen.incrementAndGet();
        if (n == 1) {
            firstRow[0] = System.nanoTime() - began;
        }
        if (n == rows) {
            done.countDown();
        }
    }

    /** Data change topics are {@code prefix.database.table}; the engine's others have fewer parts. */
    private static boolean isRowTopic(String topic) {
        return topic != null && topic.startsWith(PREFIX + ".") && topic.indexOf('.', PREFIX.length() + 1) > 0;
    }

    private static Properties properties(Args args, Path work, Path offsets) {
        String password = System.getenv(args.get("password-env"));
        if (password == null) {
            throw new IllegalArgumentException("environment variable " + args.get("password-env") + " is not set");
        }
        Properties p = new Properties();
        p.setProperty("name", ENGINE);
        p.setProperty("connector.class", "io.debezium.connector.mariadb.MariaDbConnector");
        p.setProperty("offset.storage", "org.apache.kafka.connect.storage.FileOffsetBackingStore");
        p.setProperty("offset.storage.file.filename", offsets.toString());
        p.setProperty("offset.flush.interval.ms", "1000");
        p.setProperty("database.hostname", args.get("host"));
        p.setProperty("database.port", args.get("port"));
        p.setProperty("database.user", args.get("user"));
        p.setProperty("database.password", password);
        p.setProperty("database.server.id", args.getOr("server-id", "5101"));
        p.setProperty("database.ssl.mode", "disable");
        p.setProperty("topic.prefix", PREFIX);
        p.setProperty("database.include.list", args.getOr("database", "bench"));
        p.setProperty("schema.history.internal", "io.debezium.storage.file.history.FileSchemaHistory");
        p.setProperty("schema.history.internal.file.filename", work.resolve("schema-history.dat").toString());
        // The start position comes from the offsets file; recovery rebuilds the schema history
        // from the tables as they are (the workload changes no table definitions).
        p.setProperty("snapshot.mode", "recovery");
        p.setProperty("snapshot.locking.mode", "none");
        p.setProperty("include.schema.changes", "false");
        p.setProperty("tombstones.on.delete", "false");
        return p;
    }

    /**
     * The offsets file Kafka Connect's FileOffsetBackingStore reads: a serialised map from the
     * JSON key [engine name, source partition] to the JSON offset, here the start position. The
     * MariaDB connector streams by GTID only (without one it fails on a null GTID set), so the
     * offset carries the server's {@code gtid_binlog_pos} taken with the file and position.
     */
    private static void writeStartOffset(Path offsets, String file, long pos, String gtids) throws IOException {
        HashMap<byte[], byte[]> raw = new HashMap<>();
        String key = "[\"" + ENGINE + "\",{\"server\":\"" + PREFIX + "\"}]";
        String value = "{\"file\":\"" + file + "\",\"pos\":" + pos + ",\"gtids\":\"" + gtids + "\"}";
        raw.put(key.getBytes(StandardCharsets.UTF_8), value.getBytes(StandardCharsets.UTF_8));
        try (OutputStream os = Files.newOutputStream(offsets); ObjectOutputStream oos = new ObjectOutputStream(os)) {
            oos.writeObject(raw);
        }
    }

    /** {@code --name value} pairs. */
    static final class Args {
        private final HashMap<String, String> values = new HashMap<>();

        static Args parse(String[] argv) {
            Args args = new Args();
            for (int i = 0; i + 1 < argv.length; i += 2) {
                if (!argv[i].startsWith("--")) {
                    throw new IllegalArgumentException("expected --name value, got " + argv[i]);
                }
                args.values.put(argv[i].substring(2), argv[i + 1]);
            }
            return args;
        }

        String get(String name) {
            String value = values.get(name);
            if (value == null) {
                throw new IllegalArgumentException("missing --" + name);
            }
            return value;
        }

        String getOr(String name, String fallback) {
            return values.getOrDefault(name, fallback);
        }
    }
}
