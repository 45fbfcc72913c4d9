// strata's route-history job written as a Kafka Streams application (Processor API
// over a persistent RocksDB key-value store), run bounded: it stops by itself once
// the input records present at start are processed and committed.
//
//   java RouteHistory <input-topic> <output-topic>
//
// Environment: STRATA_KAFKA_BROKERS [127.0.0.1:9092], APP_ID [ks-route-history-<epoch s>],
// STATE_DIR [required], COMMIT_MS [2000], THREADS [2], CACHE_MB [10].
// See README.md beside this file.

import com.fasterxml.jackson.core.JsonFactory;
import com.fasterxml.jackson.core.JsonGenerator;
import com.fasterxml.jackson.core.JsonParser;
import com.fasterxml.jackson.core.JsonToken;
import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.time.Duration;
import java.time.LocalDate;
import java.time.LocalDateTime;
import java.time.ZoneOffset;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.Properties;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.atomic.AtomicLong;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.admin.OffsetSpec;
import org.apache.kafka.clients.admin.TopicDescription;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.common.Metric;
import org.apache.kafka.common.MetricName;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.errors.TopicExistsException;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.common.utils.Bytes;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.TopologyConfig;
import org.apache.kafka.streams.kstream.Consumed;
import org.apache.kafka.streams.kstream.Produced;
import org.apache.kafka.streams.processor.api.FixedKeyProcessor;
import org.apache.kafka.streams.processor.api.FixedKeyProcessorContext;
import org.apache.kafka.streams.processor.api.FixedKeyRecord;
import org.apache.kafka.streams.state.KeyValueStore;
import org.apache.kafka.streams.state.Stores;

public class RouteHistory {
    static final String STORE = "route-flights";
    static final long WINDOW_MS = 60L * 24 * 3600 * 1000;
    static final JsonFactory JSON = new JsonFactory();

    static final AtomicLong recordsIn = new AtomicLong();
    static final AtomicLong recordsOut = new AtomicLong();
    static final AtomicLong firstRecordNanos = new AtomicLong();

    /** THROTTLE: output records per second, over all threads (0: unthrottled), as strata's sink.max-records-per-second. */
    static final long THROTTLE_INTERVAL_NANOS = throttleInterval();
    static final AtomicLong nextSlotNanos = new AtomicLong();

    static long throttleInterval() {
        long rate = Long.parseLong(env("THROTTLE", "0"));
        return rate > 0 ? 1_000_000_000L / rate : 0;
    }

    /** Waits for this record's slot when throttled (sleeps only when 1 ms or more ahead; 20 ms of burst). */
    static void pace() {
        if (THROTTLE_INTERVAL_NANOS == 0) {
            return;
        }
        long now = System.nanoTime();
        nextSlotNanos.compareAndSet(0, now);
        nextSlotNanos.updateAndGet(n -> Math.max(n, now - 20_000_000L));
        long slot = nextSlotNanos.getAndAdd(THROTTLE_INTERVAL_NANOS);
        long ahead = slot - now;
        if (ahead >= 1_000_000L) {
            try {
                Thread.sleep(ahead / 1_000_000L, (int) (ahead % 1_000_000L));
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
            }
        }
    }

    /** For each flight: the route's flights of the last 60 days (itself included), then one output record. */
    static class WindowProcessor implements FixedKeyProcessor<byte[], byte[], byte[]> {
        FixedKeyProcessorContext<byte[], byte[]> context;
        KeyValueStore<Bytes, byte[]> store;
        final RouteFlights flights = new RouteFlights();

        @Override
        public void init(FixedKeyProcessorContext<byte[], byte[]> context) {
            this.context = context;
            this.store = context.getStateStore(STORE);
        }

        @Override
        public void process(FixedKeyRecord<byte[], byte[]> record) {
            if (recordsIn.getAndIncrement() == 0) {
                firstRecordNanos.compareAndSet(0, System.nanoTime());
            }
            if (record.key() == null || record.value() == null) {
                throw new IllegalArgumentException("a record without key or value");
            }
            Flight f = Flight.parse(record.value());
            Bytes key = Bytes.wrap(record.key());
            flights.decode(store.get(key));
            flights.dropUpTo(f.dateMs - WINDOW_MS);
            flights.add(f.dateMs, f.delay);
            store.put(key, flights.encode());
            long n = flights.size;
            double avg = (double) flights.sum() / n;
            pace();
            context.forward(record.withValue(f.output(n, avg)));
            recordsOut.incrementAndGet();
        }
    }

    /** One input record: {"date":"YYYY-MM-DDTHH:MM:SS","delay":N,"origin":"..","destination":"..",...}. */
    static class Flight {
        String origin, destination, date;
        long dateMs, delay;
        boolean hasDelay;

        static Flight parse(byte[] json) {
            Flight f = new Flight();
            try (JsonParser p = JSON.createParser(json)) {
                if (p.nextToken() != JsonToken.START_OBJECT) {
                    throw new IllegalArgumentException("not a JSON object");
                }
                while (p.nextToken() == JsonToken.FIELD_NAME) {
                    String name = p.currentName();
                    p.nextToken();
                    switch (name) {
                        case "origin" -> f.origin = p.getText();
                        case "destination" -> f.destination = p.getText();
                        case "date" -> f.date = p.getText();
                        case "delay" -> { f.delay = p.getLongValue(); f.hasDelay = true; }
                        default -> p.skipChildren();
                    }
                }
            } catch (IOException e) {
                throw new UncheckedIOException(e);
            }
            if (f.origin == null || f.destination == null || f.date == null || !f.hasDelay) {
                throw new IllegalArgumentException("a flight lacks origin, destination, date or delay: " + new String(json));
            }
            f.dateMs = epochMillis(f.date);
            return f;
        }

        /** UTC `YYYY-MM-DDTHH:MM:SS` (other ISO local forms through LocalDateTime.parse). */
        static long epochMillis(String s) {
            if (s.length() == 19 && s.charAt(4) == '-' && s.charAt(7) == '-' && s.charAt(10) == 'T'
                    && s.charAt(13) == ':' && s.charAt(16) == ':') {
                long days = LocalDate.of(num(s, 0, 4), num(s, 5, 7), num(s, 8, 10)).toEpochDay();
                return ((days * 24 + num(s, 11, 13)) * 60 + num(s, 14, 16)) * 60_000 + num(s, 17, 19) * 1000L;
            }
            return LocalDateTime.parse(s).toInstant(ZoneOffset.UTC).toEpochMilli();
        }

        static int num(String s, int from, int to) {
            int v = 0;
            for (int i = from; i < to; i++) {
                char c = s.charAt(i);
                if (c < '0' || c > '9') {
                    throw new IllegalArgumentException("bad date " + s);
                }
                v = v * 10 + (c - '0');
            }
            return v;
        }

        byte[] output(long n, double avg) {
            ByteArrayOutputStream out = new ByteArrayOutputStream(128);
            try (JsonGenerator g = JSON.createGenerator(out)) {
                g.writeStartObject();
                g.writeStringField("origin", origin);
                g.writeStringField("destination", destination);
                g.writeStringField("date", date);
                g.writeNumberField("delay", delay);
                g.writeNumberField("flights_60d", n);
                g.writeNumberField("avg_delay_60d", avg);
                g.writeEndObject();
            } catch (IOException e) {
                throw new UncheckedIOException(e);
            }
            return out.toByteArray();
        }
    }

    /**
     * A route's recent flights in input order, stored as varints: the first date (ms) and
     * then each date as the difference to the previous one, each followed by its delay
     * (both zigzag-encoded).
     */
    static class RouteFlights {
        long[] dates = new long[64];
        long[] delays = new long[64];
        int start, size;

        void decode(byte[] b) {
            start = 0;
            size = 0;
            if (b == null) {
                return;
            }
            int[] pos = {0};
            long date = 0;
            while (pos[0] < b.length) {
                date += unzigzag(readVarint(b, pos));
                long delay = unzigzag(readVarint(b, pos));
                append(date, delay);
            }
        }

        void append(long date, long delay) {
            if (start + size == dates.length) {
                int cap = Math.max(64, 2 * size);
                long[] d = new long[cap], l = new long[cap];
                System.arraycopy(dates, start, d, 0, size);
                System.arraycopy(delays, start, l, 0, size);
                dates = d;
                delays = l;
                start = 0;
            }
            dates[start + size] = date;
            delays[start + size] = delay;
            size++;
        }

        /** Drops the leading flights dated at or before `cutoff` (the input is sorted by date). */
        void dropUpTo(long cutoff) {
            while (size > 0 && dates[start] <= cutoff) {
                start++;
                size--;
            }
        }

        void add(long date, long delay) {
            append(date, delay);
        }

        long sum() {
            long s = 0;
            for (int i = start; i < start + size; i++) {
                s += delays[i];
            }
            return s;
        }

        byte[] encode() {
            byte[] b = new byte[size * 20];
            int p = 0;
            long prev = 0;
            for (int i = start; i < start + size; i++) {
                p = writeVarint(b, p, zigzag(dates[i] - prev));
                p = writeVarint(b, p, zigzag(delays[i]));
                prev = dates[i];
            }
            return java.util.Arrays.copyOf(b, p);
        }

        static long zigzag(long v) {
            return (v << 1) ^ (v >> 63);
        }

        static long unzigzag(long v) {
            return (v >>> 1) ^ -(v & 1);
        }

        static int writeVarint(byte[] b, int p, long v) {
            while ((v & ~0x7FL) != 0) {
                b[p++] = (byte) ((v & 0x7F) | 0x80);
                v >>>= 7;
            }
            b[p++] = (byte) v;
            return p;
        }

        static long readVarint(byte[] b, int[] pos) {
            long v = 0;
            for (int shift = 0; ; shift += 7) {
                byte x = b[pos[0]++];
                v |= (long) (x & 0x7F) << shift;
                if (x >= 0) {
                    return v;
                }
            }
        }
    }

    static String env(String name, String dflt) {
        String v = System.getenv(name);
        return v == null || v.isEmpty() ? dflt : v;
    }

    public static void main(String[] args) throws Exception {
        if (args.length != 2) {
            System.err.println("usage: RouteHistory <input-topic> <output-topic>");
            System.exit(2);
        }
        String input = args[0], output = args[1];
        String brokers = env("STRATA_KAFKA_BROKERS", "127.0.0.1:9092");
        String appId = env("APP_ID", "ks-route-history-" + System.currentTimeMillis() / 1000);
        String stateDir = env("STATE_DIR", null);
        if (stateDir == null) {
            System.err.println("kstreams: STATE_DIR is not set");
            System.exit(2);
        }
        int commitMs = Integer.parseInt(env("COMMIT_MS", "2000"));
        int threads = Integer.parseInt(env("THREADS", "2"));
        long cacheBytes = Long.parseLong(env("CACHE_MB", "10")) * 1024 * 1024;

        Properties ap = new Properties();
        ap.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, brokers);
        try (Admin admin = Admin.create(ap)) {
            // The input's extent at start: the run stops once all of it is committed.
            TopicDescription desc = admin.describeTopics(List.of(input)).allTopicNames().get().get(input);
            int partitions = desc.partitions().size();
            Map<TopicPartition, OffsetSpec> earliest = new HashMap<>(), latest = new HashMap<>();
            for (var p : desc.partitions()) {
                TopicPartition tp = new TopicPartition(input, p.partition());
                earliest.put(tp, OffsetSpec.earliest());
                latest.put(tp, OffsetSpec.latest());
            }
            Map<TopicPartition, Long> ends = new HashMap<>(); // partitions with records only
            long total = 0;
            var starts = admin.listOffsets(earliest).all().get();
            for (var e : admin.listOffsets(latest).all().get().entrySet()) {
                long n = e.getValue().offset() - starts.get(e.getKey()).offset();
                if (n > 0) {
                    ends.put(e.getKey(), e.getValue().offset());
                    total += n;
                }
            }
            // RECORDS: a live input (a latency run); stop after that many, at the end offsets then.
            String expected = env("RECORDS", null);
            if (expected != null) {
                total = Long.parseLong(expected);
                ends.clear();
            }
            // The output topic, with the input's partition count.
            try {
                admin.createTopics(List.of(new NewTopic(output, Optional.of(partitions), Optional.empty()))).all().get();
            } catch (ExecutionException e) {
                if (!(e.getCause() instanceof TopicExistsException)) {
                    throw e;
                }
            }
            System.err.printf("kstreams: %s: %d records in %d partitions -> %s; application.id=%s threads=%d commit.interval.ms=%d%n",
                    input, total, partitions, output, appId, threads, commitMs);

            Properties p = new Properties();
            p.put(StreamsConfig.APPLICATION_ID_CONFIG, appId);
            p.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, brokers);
            p.put(StreamsConfig.PROCESSING_GUARANTEE_CONFIG, StreamsConfig.EXACTLY_ONCE_V2);
            p.put(StreamsConfig.COMMIT_INTERVAL_MS_CONFIG, String.valueOf(commitMs));
            p.put(StreamsConfig.NUM_STREAM_THREADS_CONFIG, String.valueOf(threads));
            p.put(StreamsConfig.STATE_DIR_CONFIG, stateDir);
            p.put(StreamsConfig.STATESTORE_CACHE_MAX_BYTES_CONFIG, String.valueOf(cacheBytes));
            // One metrics sample window over the whole run, so commit-latency-avg is the run's mean.
            p.put(StreamsConfig.METRICS_SAMPLE_WINDOW_MS_CONFIG, String.valueOf(24L * 3600 * 1000));
            p.put(StreamsConfig.consumerPrefix(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG), "earliest");

            StreamsBuilder b = new StreamsBuilder(new TopologyConfig(new StreamsConfig(p)));
            b.addStateStore(Stores.keyValueStoreBuilder(
                            Stores.persistentKeyValueStore(STORE), Serdes.Bytes(), Serdes.ByteArray())
                    .withCachingEnabled());
            b.stream(input, Consumed.with(Serdes.ByteArray(), Serdes.ByteArray()))
                    .processValues(WindowProcessor::new, STORE)
                    .to(output, Produced.with(Serdes.ByteArray(), Serdes.ByteArray()));

            KafkaStreams streams = new KafkaStreams(b.build(), p);
            long wallStart = System.nanoTime();
            streams.start();

            // Done when every input record was processed and the group's committed
            // offsets reached the end offsets read at start.
            long doneNanos = 0;
            while (true) {
                KafkaStreams.State s = streams.state();
                if (s == KafkaStreams.State.ERROR || s == KafkaStreams.State.NOT_RUNNING
                        || s == KafkaStreams.State.PENDING_ERROR) {
                    System.err.println("kstreams: FAILED: the application is " + s);
                    streams.close(Duration.ofSeconds(30));
                    System.exit(1);
                }
                if (expected != null && recordsIn.get() >= total && ends.isEmpty()) {
                    for (var e : admin.listOffsets(latest).all().get().entrySet()) {
                        ends.put(e.getKey(), e.getValue().offset());
                    }
                }
                if (recordsIn.get() >= total && committedAll(admin, appId, ends)) {
                    doneNanos = System.nanoTime();
                    break;
                }
                Thread.sleep(recordsIn.get() >= total ? 50 : 200);
            }
            long commits = 0;
            double latencySum = 0;
            for (Map.Entry<MetricName, ? extends Metric> e : streams.metrics().entrySet()) {
                MetricName m = e.getKey();
                if (!m.group().equals("stream-thread-metrics")) {
                    continue;
                }
                if (m.name().equals("commit-total")) {
                    long c = (long) ((Number) e.getValue().metricValue()).doubleValue();
                    commits += c;
                    Metric avg = findMetric(streams, "commit-latency-avg", m.tags());
                    if (avg != null && c > 0) {
                        latencySum += ((Number) avg.metricValue()).doubleValue() * c;
                    }
                }
            }
            streams.close(Duration.ofSeconds(60));
            long first = firstRecordNanos.get();
            double secs = first == 0 ? 0 : (doneNanos - first) / 1e9;
            StringBuilder line = new StringBuilder();
            line.append(String.format("kstreams: done. records_in=%d records_out=%d elapsed_s=%.2f records_per_s=%.0f",
                    recordsIn.get(), recordsOut.get(), secs, secs > 0 ? recordsIn.get() / secs : 0.0));
            if (commits > 0 && !Double.isNaN(latencySum)) {
                line.append(String.format(" commits=%d commit_mean_ms=%.0f", commits, latencySum / commits));
            }
            line.append(String.format(" wall_s=%.2f", (System.nanoTime() - wallStart) / 1e9));
            System.err.println(line);
        }
    }

    static Metric findMetric(KafkaStreams streams, String name, Map<String, String> tags) {
        for (Map.Entry<MetricName, ? extends Metric> e : streams.metrics().entrySet()) {
            MetricName m = e.getKey();
            if (m.name().equals(name) && m.group().equals("stream-thread-metrics") && m.tags().equals(tags)) {
                return e.getValue();
            }
        }
        return null;
    }

    static boolean committedAll(Admin admin, String group, Map<TopicPartition, Long> ends) throws Exception {
        Map<TopicPartition, OffsetAndMetadata> committed =
                admin.listConsumerGroupOffsets(group).partitionsToOffsetAndMetadata().get();
        for (Map.Entry<TopicPartition, Long> e : ends.entrySet()) {
            OffsetAndMetadata c = committed.get(e.getKey());
            if (c == null || c.offset() < e.getValue()) {
                return false;
            }
        }
        return true;
    }
}
