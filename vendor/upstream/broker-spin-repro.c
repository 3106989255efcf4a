/*
 * Reproduction for vendor/upstream/broker-spin-pull-request.md: how often
 * an idempotent producer's broker thread wakes up while it waits for a slow
 * broker. Needs only librdkafka's public API and its mock cluster.
 *
 * One mock broker answering every request after 50 ms, one partition,
 * enable.idempotence=true, linger.ms=5; 20,000 records of 500 bytes are
 * queued, then flushed. The broker threads' `wakeups` (one per turn of the
 * I/O poll loop) are summed from the last statistics snapshot, with the
 * Produce requests sent and the process's CPU time.
 *
 * Build against an installed librdkafka:
 *   cc -o broker-spin-repro broker-spin-repro.c $(pkg-config --cflags --libs rdkafka)
 * or against a source tree after `./configure && make libs` (the headers
 * copied where `#include <librdkafka/...>` finds them; the libraries are
 * those ./configure enabled, none with the --disable-* flags it offers):
 *   mkdir -p inc/librdkafka && cp src/rdkafka.h src/rdkafka_mock.h inc/librdkafka/
 *   cc -I inc -o broker-spin-repro broker-spin-repro.c src/librdkafka.a \
 *      -lpthread -lm -ldl
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include <librdkafka/rdkafka.h>
#include <librdkafka/rdkafka_mock.h>

#define RECORDS 20000
#define RTT_MS  50

static char *last_stats;

static int on_stats(rd_kafka_t *rk, char *json, size_t len, void *opaque) {
        (void)rk;
        (void)len;
        (void)opaque;
        free(last_stats);
        last_stats = strdup(json);
        return 0; /* librdkafka frees json */
}

/* The sum of the numbers that follow each occurrence of `key` in `json`. */
static long long sum_after(const char *json, const char *key) {
        long long sum = 0;
        const char *at = json;
        while (at && (at = strstr(at, key)) != NULL) {
                at += strlen(key);
                sum += strtoll(at, NULL, 10);
        }
        return sum;
}

static void set(rd_kafka_conf_t *conf, const char *name, const char *value) {
        char errstr[256];
        if (rd_kafka_conf_set(conf, name, value, errstr, sizeof(errstr)) !=
            RD_KAFKA_CONF_OK) {
                fprintf(stderr, "%s: %s\n", name, errstr);
                exit(2);
        }
}

int main(void) {
        char errstr[256], payload[500], key[16];
        rd_kafka_conf_t *conf = rd_kafka_conf_new();
        rd_kafka_mock_cluster_t *mock;
        struct rusage usage;
        rd_kafka_t *rk;
        int i;

        set(conf, "test.mock.num.brokers", "1");
        set(conf, "enable.idempotence", "true");
        set(conf, "linger.ms", "5");
        set(conf, "statistics.interval.ms", "100");
        rd_kafka_conf_set_stats_cb(conf, on_stats);
        rk = rd_kafka_new(RD_KAFKA_PRODUCER, conf, errstr, sizeof(errstr));
        if (!rk) {
                fprintf(stderr, "%s\n", errstr);
                return 2;
        }
        mock = rd_kafka_handle_mock_cluster(rk);
        rd_kafka_mock_topic_create(mock, "spin", 1, 1);
        rd_kafka_mock_broker_set_rtt(mock, 1, RTT_MS);

        memset(payload, 'x', sizeof(payload));
        for (i = 0; i < RECORDS; i++) {
                snprintf(key, sizeof(key), "k%d", i % 100);
                while (rd_kafka_producev(
                           rk, RD_KAFKA_V_TOPIC("spin"),
                           RD_KAFKA_V_PARTITION(0),
                           RD_KAFKA_V_KEY(key, strlen(key)),
                           RD_KAFKA_V_VALUE(payload, sizeof(payload)),
                           RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY),
                           RD_KAFKA_V_END) == RD_KAFKA_RESP_ERR__QUEUE_FULL)
                        rd_kafka_poll(rk, 10);
        }
        if (rd_kafka_flush(rk, 60 * 1000) != RD_KAFKA_RESP_ERR_NO_ERROR) {
                fprintf(stderr, "not every record was acknowledged\n");
                return 1;
        }
        /* Let two more snapshots come, so the last one counts the flush. */
        rd_kafka_poll(rk, 250);
        if (!last_stats) {
                fprintf(stderr, "no statistics received\n");
                return 1;
        }
        getrusage(RUSAGE_SELF, &usage);
        printf("librdkafka %s: %d records, %lld Produce requests, %lld "
               "broker thread wakeups, %.2f s CPU\n",
               rd_kafka_version_str(), RECORDS,
               sum_after(last_stats, "\"Produce\":"),
               sum_after(last_stats, "\"wakeups\":"),
               (double)(usage.ru_utime.tv_sec + usage.ru_stime.tv_sec) +
                   (double)(usage.ru_utime.tv_usec + usage.ru_stime.tv_usec) /
                       1e6);
        free(last_stats);
        rd_kafka_destroy(rk);
        return 0;
}
