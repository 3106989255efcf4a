// TxnProducer: Kafka's Java transactional producer alone at a fixed
// open-loop rate, the baseline beside the relay's exactly-once mode in W1
// (benches/run.py runs it, on the jars of scripts/services' broker).
//
//   java -cp '<kafka libs>/*' benches/tools/TxnProducer.java \
//       --brokers HOST:PORT --topic T --rate R --duration-secs S --timing-file F
//       [--warmup-secs 0] [--record-bytes 500] [--per-transaction one|due]
//       [--transactional-id ID]
//
// Record n is due at start + n / rate. Each transaction holds one record
// (`one`, what `kafka-producer-perf-test --transactional-id` does with a
// transaction duration shorter than the gap between records) or every
// record due when it begins (`due`). commitTransaction blocks, so records
// that fall due during a commit wait for it: the latency an application
// emitting at the rate would see. The value starts with {"n":<n>, as
// `outbox-latency consume` expects; the timing file is the one
// `outbox-latency produce` writes (see its header), with each record's due
// time as its "commit-returned" time.

import java.io.DataOutputStream;
import java.io.FileOutputStream;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardCopyOption;
import java.util.Arrays;
import java.util.Properties;

import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.serialization.StringSerializer;

public class TxnProducer {
    public static void main(String[] args) throws Exception {
        String brokers = null;
        String topic = null;
        long rate = -1;
        double durationSecs = -1;
        double warmupSecs = 0;
        int recordBytes = 500;
        String perTransaction = "one";
        String transactionalId = "txn-producer-" + ProcessHandle.current().pid();
        Path timingFile = null;
        if (args.length % 2 != 0) usage("every option takes a value");
        for (int i = 0; i + 1 < args.length; i += 2) {
            switch (args[i]) {
                case "--brokers" -> brokers = args[i + 1];
                case "--topic" -> topic = args[i + 1];
                case "--rate" -> rate = Long.parseLong(args[i + 1]);
                case "--duration-secs" -> durationSecs = Double.parseDouble(args[i + 1]);
                case "--warmup-secs" -> warmupSecs = Double.parseDouble(args[i + 1]);
                case "--record-bytes" -> recordBytes = Integer.parseInt(args[i + 1]);
                case "--per-transaction" -> perTransaction = args[i + 1];
                case "--transactional-id" -> transactionalId = args[i + 1];
                case "--timing-file" -> timingFile = Path.of(args[i + 1]);
                default -> usage("unknown option " + args[i]);
            }
        }
        if (brokers == null || topic == null || rate <= 0 || durationSecs <= 0 || timingFile == null) {
            usage("--brokers, --topic, --rate, --duration-secs and --timing-file are required");
        }
        if (!perTransaction.equals("one") && !perTransaction.equals("due")) {
            usage("--per-transaction is one or due");
        }

        Properties props = new Properties();
        props.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, brokers);
        props.put(ProducerConfig.ACKS_CONFIG, "all");
        props.put(ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG, "true");
        props.put(ProducerConfig.TRANSACTIONAL_ID_CONFIG, transactionalId);
        props.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        props.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());

        long total = (long) (rate * durationSecs);
        double periodNs = 1e9 / rate;
        String pad = "x".repeat(Math.max(recordBytes - 90, 0));
        long[] due = new long[(int) total];
        long[] commitNs = new long[(int) Math.min(total, Integer.MAX_VALUE)];
        int commits = 0;
        long startUnixNs;
        try (KafkaProducer<String, String> producer = new KafkaProducer<>(props)) {
            producer.initTransactions();
            startUnixNs = unixNs();
            long startMono = System.nanoTime();
            long n = 0;
            while (n < total) {
                long dueNs = (long) (n * periodNs);
                long now = System.nanoTime() - startMono;
                if (now < dueNs) {
                    long wait = Math.min(dueNs - now, 1_000_000);
                    Thread.sleep(wait / 1_000_000, (int) (wait % 1_000_000));
                    continue;
                }
                long last = n;
                if (perTransaction.equals("due")) {
                    while (last + 1 < total && (long) ((last + 1) * periodNs) <= now) last++;
                }
                producer.beginTransaction();
                for (long i = n; i <= last; i++) {
                    String key = "agg-" + (i % 100);
                    String value = "{\"n\":" + i + ",\"aggregate\":\"" + key + "\",\"seq\":" + (i / 100 + 1)
                            + ",\"total\":42.5,\"pad\":\"" + pad + "\"}";
                    producer.send(new ProducerRecord<>(topic, key, value));
                    due[(int) i] = startUnixNs + (long) (i * periodNs);
                }
                long began = System.nanoTime();
                producer.commitTransaction();
                commitNs[commits++] = System.nanoTime() - began;
                n = last + 1;
            }
        }

        ByteBuffer buf = ByteBuffer.allocate(32 + due.length * 16).order(ByteOrder.LITTLE_ENDIAN);
        buf.put("OBLTIME1".getBytes());
        buf.putLong(startUnixNs).putLong((long) (warmupSecs * 1e9)).putLong(total);
        for (long d : due) buf.putLong(d).putLong(d);
        Path tmp = timingFile.resolveSibling(timingFile.getFileName() + ".tmp");
        try (DataOutputStream out = new DataOutputStream(new FileOutputStream(tmp.toFile()))) {
            out.write(buf.array());
        }
        Files.move(tmp, timingFile, StandardCopyOption.ATOMIC_MOVE);
        long[] sorted = Arrays.copyOf(commitNs, commits);
        Arrays.sort(sorted);
        System.out.printf("TxnProducer: %d records at %d/s in %d transactions; commitTransaction p50 %.2f ms, "
                + "p99 %.2f ms%n", total, rate, commits, sorted[commits / 2] / 1e6,
                sorted[Math.min(commits - 1, (int) (commits * 0.99))] / 1e6);
    }

    private static long unixNs() {
        java.time.Instant now = java.time.Instant.now();
        return now.getEpochSecond() * 1_000_000_000L + now.getNano();
    }

    private static void usage(String problem) {
        System.err.println("TxnProducer: " + problem + "\nusage: TxnProducer --brokers HOST:PORT --topic T "
                + "--rate R --duration-secs S --timing-file F [--warmup-secs 0] [--record-bytes 500] "
                + "[--per-transaction one|due] [--transactional-id ID]");
        System.exit(2);
    }
}
