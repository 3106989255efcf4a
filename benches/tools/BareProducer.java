// BareProducer: Kafka's Java producer alone, beside the relay in the
// benchmark's topics cost curve (benches/run.py runs it, on the jars of
// scripts/services' broker).
//
//   java -cp '<kafka libs>/*' benches/tools/BareProducer.java \
//       --brokers HOST:PORT --topics-file F --records N [--payload-bytes 500] [--linger-ms 5]
//
// The Java client's idempotent defaults (acks=all, enable.idempotence=true)
// with the relay's batching wait (linger.ms 5); records as the outbox load
// makes them (key "agg-<n % 100>", the jsonb text of the same payload, no
// headers), record n to the (n % count)-th topic of the file, sent as fast
// as the client takes them (send blocks while its buffer is full, or while
// a topic's metadata is fetched: the producer starts knowing no topic).
// Exits 0 once every record is acknowledged, 1 when any failed.

import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import java.util.Properties;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.atomic.AtomicReference;

import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.serialization.StringSerializer;

public class BareProducer {
    public static void main(String[] args) throws Exception {
        String brokers = null;
        Path topicsFile = null;
        long records = -1;
        int payloadBytes = 500;
        String lingerMs = "5";
        for (int i = 0; i + 1 < args.length; i += 2) {
            switch (args[i]) {
                case "--brokers" -> brokers = args[i + 1];
                case "--topics-file" -> topicsFile = Path.of(args[i + 1]);
                case "--records" -> records = Long.parseLong(args[i + 1]);
                case "--payload-bytes" -> payloadBytes = Integer.parseInt(args[i + 1]);
                case "--linger-ms" -> lingerMs = args[i + 1];
                default -> usage("unknown option " + args[i]);
            }
        }
        if (args.length % 2 != 0) usage("every option takes a value");
        if (brokers == null || topicsFile == null || records < 0) {
            usage("--brokers, --topics-file and --records are required");
        }
        List<String> topics = Files.readAllLines(topicsFile).stream()
                .map(String::trim).filter(t -> !t.isEmpty()).toList();
        if (topics.isEmpty()) usage(topicsFile + " names no topic");

        Properties props = new Properties();
        props.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, brokers);
        props.put(ProducerConfig.ACKS_CONFIG, "all");
        props.put(ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG, "true");
        props.put(ProducerConfig.LINGER_MS_CONFIG, lingerMs);
        props.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        props.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());

        String pad = "x".repeat(Math.max(payloadBytes - 90, 0));
        AtomicLong acked = new AtomicLong();
        AtomicLong failed = new AtomicLong();
        AtomicReference<Exception> firstError = new AtomicReference<>();
        long started = System.nanoTime();
        try (KafkaProducer<String, String> producer = new KafkaProducer<>(props)) {
            for (long n = 0; n < records; n++) {
                String topic = topics.get((int) (n % topics.size()));
                // PostgreSQL's text of run.py's payload_sql jsonb, as the relay sends it.
                String value = "{\"n\": " + n + ", \"pad\": \"" + pad + "\", \"seq\": " + (n / 100 + 1)
                        + ", \"total\": 42.5, \"aggregate\": \"agg-" + (n % 100) + "\"}";
                producer.send(new ProducerRecord<>(topic, "agg-" + (n % 100), value), (md, e) -> {
                    if (e == null) {
                        acked.incrementAndGet();
                    } else {
                        failed.incrementAndGet();
                        firstError.compareAndSet(null, e);
                    }
                });
            }
            producer.flush();
        }
        if (acked.get() != records) {
            System.err.printf("%d of %d records acknowledged, %d failed; first error: %s%n",
                    acked.get(), records, failed.get(), firstError.get());
            System.exit(1);
        }
        System.out.printf("BareProducer: %d records to %d topic(s) acknowledged in %.3f s%n",
                records, topics.size(), (System.nanoTime() - started) / 1e9);
    }

    private static void usage(String problem) {
        System.err.println("BareProducer: " + problem + "\nusage: BareProducer --brokers HOST:PORT "
                + "--topics-file FILE --records N [--payload-bytes 500] [--linger-ms 5]");
        System.exit(2);
    }
}
