package runfacts.bench;

import java.io.FileWriter;
import java.io.IOException;
import java.lang.management.ManagementFactory;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.HashMap;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.atomic.AtomicLong;

import org.apache.avro.Schema;
import org.apache.avro.generic.GenericDatumReader;
import org.apache.avro.generic.GenericRecord;
import org.apache.avro.io.BinaryDecoder;
import org.apache.avro.io.DecoderFactory;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.kstream.Consumed;
import org.apache.kafka.streams.kstream.Produced;
import org.apache.kafka.streams.processor.api.Processor;
import org.apache.kafka.streams.processor.api.ProcessorContext;
import org.apache.kafka.streams.processor.api.Record;
import org.apache.kafka.streams.state.KeyValueStore;
import org.apache.kafka.streams.state.Stores;

/**
 * The benchmark reduction of benchmarks/bench_common.py on Kafka Streams: decode the Avro
 * envelope (every field, org.apache.avro GenericDatumReader), per run a count and the last event
 * in a RocksDB store (state = 8-byte big-endian count + the raw envelope), one JSON output per
 * input ({"runId","count","eventId","eventType"}). Progress lines as bench_common.Progress:
 * "seen wall pid cpu" at the first measured and at the expect-th event, cpu being the CPU time
 * of the whole JVM (every thread: stream thread, producer and consumer I/O, RocksDB, GC, JIT).
 * With --warmup W the first line is written at event W + 1, so the JIT-compiled steady state is
 * measured; the harness counts the events between the two lines.
 */
public final class KStreamsPeer {
    private KStreamsPeer() {}

    public static void main(String[] argv) throws Exception {
        Map<String, String> a = new HashMap<>();
        for (int i = 0; i + 1 < argv.length; i += 2) {
            a.put(argv[i].replaceFirst("^--", ""), argv[i + 1]);
        }
        Schema schema = new Schema.Parser().parse(Files.readString(Path.of(a.get("schema"))));
        long expect = Long.parseLong(a.get("expect"));
        long warmup = Long.parseLong(a.getOrDefault("warmup", "0"));
        String progress = a.get("progress");

        Properties props = new Properties();
        props.put(StreamsConfig.APPLICATION_ID_CONFIG, a.get("group"));
        props.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, a.get("bootstrap"));
        props.put(StreamsConfig.STATE_DIR_CONFIG, a.get("state-dir"));
        props.put(StreamsConfig.NUM_STREAM_THREADS_CONFIG, 1);
        props.put(StreamsConfig.PROCESSING_GUARANTEE_CONFIG,
                  "exactly_once".equals(a.get("guarantee")) ? StreamsConfig.EXACTLY_ONCE_V2 : StreamsConfig.AT_LEAST_ONCE);
        props.put(StreamsConfig.consumerPrefix("auto.offset.reset"), "earliest");

        StreamsBuilder builder = new StreamsBuilder();
        builder.addStateStore(Stores.keyValueStoreBuilder(Stores.persistentKeyValueStore("runs"),
                                                          Serdes.ByteArray(), Serdes.ByteArray()));
        builder.stream(a.get("input"), Consumed.with(Serdes.ByteArray(), Serdes.ByteArray()))
               .process(() -> new Reduce(schema, expect, warmup, progress), "runs")
               .to(a.get("output"), Produced.with(Serdes.ByteArray(), Serdes.ByteArray()));

        KafkaStreams streams = new KafkaStreams(builder.build(), props);
        CountDownLatch stop = new CountDownLatch(1);
        Runtime.getRuntime().addShutdownHook(new Thread(() -> {
            streams.close();
            stop.countDown();
        }));
        streams.start();
        stop.await();
    }

    /** Events processed by every task of the process (Kafka Streams runs one processor per task). */
    static final AtomicLong SEEN = new AtomicLong();

    static final class Reduce implements Processor<byte[], byte[], byte[], byte[]> {
        private final GenericDatumReader<GenericRecord> reader;
        private final long expect;
        private final long warmup;
        private final String progress;
        private KeyValueStore<byte[], byte[]> store;
        private ProcessorContext<byte[], byte[]> context;
        private BinaryDecoder decoder;
        private GenericRecord reuse;

        Reduce(Schema schema, long expect, long warmup, String progress) {
            this.reader = new GenericDatumReader<>(schema);
            this.expect = expect;
            this.warmup = warmup;
            this.progress = progress;
        }

        @Override
        public void init(ProcessorContext<byte[], byte[]> context) {
            this.context = context;
            this.store = context.getStateStore("runs");
        }

        @Override
        public void process(Record<byte[], byte[]> record) {
            byte[] raw = record.value();
            try {
                decoder = DecoderFactory.get().binaryDecoder(raw, decoder);
                reuse = reader.read(reuse, decoder);
                if (!decoder.isEnd()) {
                    throw new IllegalStateException("trailing bytes after the envelope");
                }
            } catch (IOException e) {
                throw new IllegalStateException("undecodable envelope", e);
            }
            byte[] prev = store.get(record.key());
            long count = (prev == null ? 0 : ByteBuffer.wrap(prev, 0, 8).getLong()) + 1;
            byte[] state = ByteBuffer.allocate(8 + raw.length).putLong(count).put(raw).array();
            store.put(record.key(), state);
            String out = "{\"runId\": \"" + escape(reuse.get("runId")) + "\", \"count\": " + count
                         + ", \"eventId\": \"" + escape(reuse.get("eventId")) + "\", \"eventType\": \""
                         + escape(reuse.get("eventType")) + "\"}";
            context.forward(record.withValue(out.getBytes(StandardCharsets.UTF_8)));
            tick();
        }

        /** Where the JVM's CPU went, per thread (stderr, the benchmark's log): the reading aid for the rows. */
        private static void threadCpu() {
            java.lang.management.ThreadMXBean threads = ManagementFactory.getThreadMXBean();
            java.util.List<String> lines = new java.util.ArrayList<>();
            for (long id : threads.getAllThreadIds()) {
                java.lang.management.ThreadInfo info = threads.getThreadInfo(id);
                long ns = threads.getThreadCpuTime(id);
                if (info != null && ns > 0) {
                    lines.add(String.format("%10.3f s  %s", ns / 1e9, info.getThreadName()));
                }
            }
            lines.sort(java.util.Comparator.reverseOrder());
            System.err.println("JVM threads by CPU (JIT compiler and GC threads are not Java threads: the rest):");
            lines.forEach(System.err::println);
        }

        private static String escape(Object value) {
            String s = String.valueOf(value);
            StringBuilder b = new StringBuilder(s.length() + 2);
            for (int i = 0; i < s.length(); i++) {
                char c = s.charAt(i);
                if (c == '"' || c == '\\') {
                    b.append('\\').append(c);
                } else if (c < 0x20) {
                    b.append(String.format("\\u%04x", (int) c));
                } else {
                    b.append(c);
                }
            }
            return b.toString();
        }

        private void tick() {
            long seen = SEEN.incrementAndGet();
            if (seen == warmup + 1 || seen == expect) {
                double wall = System.currentTimeMillis() / 1000.0;
                double cpu = ((com.sun.management.OperatingSystemMXBean) ManagementFactory.getOperatingSystemMXBean())
                        .getProcessCpuTime() / 1e9;
                try (FileWriter fh = new FileWriter(progress, StandardCharsets.UTF_8, true)) {
                    fh.write(String.format("%d %.6f %d %.6f%n", seen, wall, ProcessHandle.current().pid(), cpu));
                } catch (IOException e) {
                    throw new IllegalStateException("progress file " + progress, e);
                }
                if (seen == expect) {
                    threadCpu();
                }
            }
        }
    }
}
