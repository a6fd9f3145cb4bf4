// Drives sarama against a gateway: produce keyed messages with headers under one
// codec (sync producer, acks=all), then read them back with a partition consumer
// (no group) and print one JSON line with what came back.
// Usage: sarama-e2e <bootstrap> <topic> <codec> <count>
package main

import (
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"time"

	"github.com/Shopify/sarama"
)

type record struct {
	Offset    int64  `json:"offset"`
	Key       string `json:"key"`
	Value     string `json:"value"`
	Header    string `json:"header"`
	Timestamp int64  `json:"timestamp"`
}

func main() {
	bootstrap, topic, codecName := os.Args[1], os.Args[2], os.Args[3]
	count, _ := strconv.Atoi(os.Args[4])
	codecs := map[string]sarama.CompressionCodec{
		"none": sarama.CompressionNone, "gzip": sarama.CompressionGZIP, "snappy": sarama.CompressionSnappy,
		"lz4": sarama.CompressionLZ4, "zstd": sarama.CompressionZSTD,
	}
	config := sarama.NewConfig()
	config.Version = sarama.V2_1_0_0 // record batches v2, headers, zstd
	config.Producer.RequiredAcks = sarama.WaitForAll
	config.Producer.Return.Successes = true
	config.Producer.Compression = codecs[codecName]
	config.Producer.Partitioner = sarama.NewManualPartitioner
	config.Consumer.Return.Errors = true
	secure(config)

	producer, err := sarama.NewSyncProducer([]string{bootstrap}, config)
	fail(err)
	base := time.Unix(1700000000, 0)
	var acked []int64
	for i := 0; i < count; i++ {
		_, offset, err := producer.SendMessage(&sarama.ProducerMessage{
			Topic: topic, Partition: 0, Key: sarama.StringEncoder(fmt.Sprintf("k%d", i)),
			Value:     sarama.StringEncoder(fmt.Sprintf("value %d", i)),
			Headers:   []sarama.RecordHeader{{Key: []byte("n"), Value: []byte(strconv.Itoa(i))}},
			Timestamp: base.Add(time.Duration(i) * time.Millisecond),
		})
		fail(err)
		acked = append(acked, offset)
	}
	fail(producer.Close())

	consumer, err := sarama.NewConsumer([]string{bootstrap}, config)
	fail(err)
	partition, err := consumer.ConsumePartition(topic, 0, sarama.OffsetOldest)
	fail(err)
	var got []record
	timeout := time.After(20 * time.Second)
	for len(got) < count {
		select {
		case m := <-partition.Messages():
			header := ""
			if len(m.Headers) == 1 {
				header = string(m.Headers[0].Key) + "=" + string(m.Headers[0].Value)
			}
			got = append(got, record{m.Offset, string(m.Key), string(m.Value), header, m.Timestamp.UnixNano() / 1e6})
		case e := <-partition.Errors():
			fail(e)
		case <-timeout:
			fail(fmt.Errorf("timed out with %d of %d messages", len(got), count))
		}
	}
	fail(partition.Close())
	fail(consumer.Close())
	out, _ := json.Marshal(map[string]interface{}{"acked": acked, "records": got})
	fmt.Println(string(out))
}

func fail(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
