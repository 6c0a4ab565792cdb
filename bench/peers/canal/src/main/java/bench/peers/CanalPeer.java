package bench.peers;

import com.alibaba.otter.canal.common.alarm.LogAlarmHandler;
import com.alibaba.otter.canal.filter.aviater.AviaterRegexFilter;
import com.alibaba.otter.canal.parse.index.FileMixedLogPositionManager;
import com.alibaba.otter.canal.parse.index.MemoryLogPositionManager;
import com.alibaba.otter.canal.parse.inbound.mysql.MysqlEventParser;
import com.alibaba.otter.canal.parse.support.AuthenticationInfo;
import com.alibaba.otter.canal.protocol.CanalEntry.Entry;
import com.alibaba.otter.canal.protocol.CanalEntry.EntryType;
import com.alibaba.otter.canal.protocol.CanalEntry.EventType;
import com.alibaba.otter.canal.protocol.CanalEntry.RowChange;
import com.alibaba.otter.canal.protocol.position.EntryPosition;
import com.alibaba.otter.canal.protocol.position.LogPosition;
import com.alibaba.otter.canal.sink.AbstractCanalEventSink;
import com.alibaba.otter.canal.sink.exception.CanalSinkException;
import com.google.protobuf.InvalidProtocolBufferException;
import java.io.File;
import java.net.InetSocketAddress;
import java.util.HashMap;
import java.util.List;
import java.util.Locale;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.atomic.AtomicReference;

/**
 * Canal's binlog parser ({@code MysqlEventParser}, what a Canal server runs per destination)
 * on its own, started at a given binlog file and position, with an event sink that counts row
 * changes until it has seen a given number. Log positions go to a file (Canal's file-mixed
 * position manager). The parser runs with Canal's defaults (parallel parsing, no table-meta
 * history database). Ends with one line {@code PEER_RESULT {...}} on stdout.
 *
 * <p>Canal retries a failing dump forever; the harness gives up after three failed attempts
 * and prints the first one, so a binlog Canal cannot read ends the run with its error.
 */
public final class CanalPeer {
    private static final String DESTINATION = "peer-canal";
    private static final int FAILURES_TO_GIVE_UP = 3;

    public static void main(String[] argv) throws Exception {
        long began = System.nanoTime();
        HashMap<String, String> args = parse(argv);
        long rows = Long.parseLong(need(args, "rows"));
        String password = System.getenv(need(args, "password-env"));
        if (password == null) {
            throw new IllegalArgumentException("environment variable " + args.get("password-env") + " is not set");
        }
        String database = args.getOrDefault("database", "bench");
        File work = new File(need(args, "work"));
        work.mkdirs();

        AtomicLong seen = new AtomicLong();
        long[] firstRow = {0};
        CountDownLatch done = new CountDownLatch(1);
        AtomicReference<Throwable> firstFailure = new AtomicReference<>();
        AtomicLong failures = new AtomicLong();

        MemoryLogPositionManager memory = new MemoryLogPositionManager();
        FileMixedLogPositionManager positions = new FileMixedLogPositionManager(work, 1000, memory) {
            // With no file yet it answers an empty position (no identity) where the parser
            // expects null for "none, use the master position", and fails on it.
            @Override
            public LogPosition getLatestIndexBy(String destination) {
                LogPosition position = super.getLatestIndexBy(destination);
                return position == null || position.getIdentity() == null ? null : position;
            }
        };
        CountingSink sink = new CountingSink(seen, rows, firstRow, began, done);

        MysqlEventParser parser = new MysqlEventParser();
        parser.setDestination(DESTINATION);
        parser.setSlaveId(Long.parseLong(args.getOrDefault("server-id", "5301")));
        parser.setMasterInfo(new AuthenticationInfo(
                new InetSocketAddress(need(args, "host"), Integer.parseInt(need(args, "port"))),
                need(args, "user"), password));
        parser.setMasterPosition(new EntryPosition(need(args, "file"), Long.parseLong(need(args, "pos"))));
        parser.setEventFilter(new AviaterRegexFilter(database + "\\..*"));
        parser.setDetectingEnable(false);
        parser.setAlarmHandler(new LogAlarmHandler());
        parser.setLogPositionManager(positions);
        parser.setEventSink(sink);
        parser.setParserExceptionHandler(error -> {
            firstFailure.compareAndSet(null, error);
            if (failures.incrementAndGet() >= FAILURES_TO_GIVE_UP) {
                done.countDown();
            }
        });

        positions.start();
        sink.start();
        parser.start();
        boolean finished = done.await(Long.parseLong(args.getOrDefault("timeout", "1800")), TimeUnit.SECONDS)
                && seen.get() >= rows;
        double elapsed = (System.nanoTime() - began) / 1e9;
        if (!finished && firstFailure.get() != null) {
            System.err.println("Canal's parser failed " + failures.get() + " times; the first failure:");
            firstFailure.get().printStackTrace();
        }
        System.out.printf(Locale.ROOT,
                "PEER_RESULT {\"peer\": \"canal\", \"rows\": %d, \"elapsed_s\": %.3f, \"first_row_s\": %.3f, \"complete\": %b}%n",
                seen.get(), elapsed, firstRow[0] / 1e9, finished);
        System.out.flush();
        // Stop the parser's threads; if a stop hangs, the exit below ends the JVM anyway.
        Thread stopper = new Thread(() -> {
            parser.stop();
            sink.stop();
            positions.stop();
        });
        stopper.setDaemon(true);
        stopper.start();
        stopper.join(TimeUnit.SECONDS.toMillis(10));
        System.exit(finished ? 0 : 3);
    }

    /** Counts the rows of every insert, update and delete entry; sees nothing else. */
    static final class CountingSink extends AbstractCanalEventSink<List<Entry>> {
        private final AtomicLong seen;
        private final long rows;
        private final long[] firstRow;
        private final long began;
        private final CountDownLatch done;

        CountingSink(AtomicLong seen, long rows, long[] firstRow, long began, CountDownLatch done) {
            this.seen = seen;
            this.rows = rows;
            this.firstRow = firstRow;
            this.began = began;
            this.done = done;
        }

        @Override
        public boolean sink(List<Entry> entries, InetSocketAddress address, String destination)
                throws CanalSinkException {
            for (Entry entry : entries) {
                if (entry.getEntryType() != EntryType.ROWDATA) {
                    continue;
                }
                EventType type = entry.getHeader().getEventType();
                if (type != EventType.INSERT && type != EventType.UPDATE && type != EventType.DELETE) {
                    continue;
                }
                int count;
                try {
                    // what a Canal client does with an entry: its row changes are a protobuf
                    count = RowChange.parseFrom(entry.getStoreValue()).getRowDatasCount();
                } catch (InvalidProtocolBufferException error) {
                    throw new CanalSinkException(error);
                }
                long before = seen.getAndAdd(count);
                if (before == 0 && count > 0) {
                    firstRow[0] = System.nanoTime() - began;
                }
                if (before < rows && before + count >= rows) {
                    done.countDown();
                }
            }
            return true;
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
