// Reads partition 0 of a topic with a sarama partition consumer from <offset> until
// nothing more comes for two seconds (a cleaned log's last offsets may hold nothing),
// and prints one JSON line: {"records": [{offset, key, value, null}]}.
// Usage: sarama-read <bootstrap> <topic> <offset>
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
	Offset int64  `json:"offset"`
	Key    string `json:"key"`
	Value  string `json:"value"`
	Null   bool   `json:"null"`
}

func main() {
	bootstrap, topic := os.Args[1], os.Args[2]
	start, _ := strconv.ParseInt(os.Args[3], 10, 64)
	config := sarama.NewConfig()
	config.Version = sarama.V2_1_0_0
	config.Consumer.Return.Errors = true
	consumer, err := sarama.NewConsumer([]string{bootstrap}, config)
	fail(err)
	partition, err := consumer.ConsumePartition(topic, 0, start)
	fail(err)
	got := []record{}
	deadline := time.After(120 * time.Second)
	for done := false; !done; {
		select {
		case m := <-partition.Messages():
			got = append(got, record{m.Offset, string(m.Key), string(m.Value), m.Value == nil})
		case e := <-partition.Errors():
			fail(e)
		case <-time.After(2 * time.Second):
			done = true
		case <-deadline:
			fail(fmt.Errorf("still reading after 120 s, %d records", len(got)))
		}
	}
	fail(partition.Close())
	fail(consumer.Close())
	out, _ := json.Marshal(map[string]interface{}{"records": got})
	fmt.Println(string(out))
}

func fail(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
