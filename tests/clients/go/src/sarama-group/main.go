// Runs N sarama ConsumerGroup members on one topic until they have read COUNT
// messages between them (marking offsets as they go); prints one JSON line with
// the values each member read.
// Usage: sarama-group <bootstrap> <topic> <group> <members> <count>
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/Shopify/sarama"
)

type handler struct {
	member int
	mu     *sync.Mutex
	seen   [][]string
	total  *int
	count  int
	cancel context.CancelFunc
}

func (h *handler) Setup(sarama.ConsumerGroupSession) error   { return nil }
func (h *handler) Cleanup(sarama.ConsumerGroupSession) error { return nil }
func (h *handler) ConsumeClaim(session sarama.ConsumerGroupSession, claim sarama.ConsumerGroupClaim) error {
	for message := range claim.Messages() {
		h.mu.Lock()
		h.seen[h.member] = append(h.seen[h.member], string(message.Value))
		*h.total++
		if *h.total >= h.count {
			h.cancel()
		}
		h.mu.Unlock()
		session.MarkMessage(message, "")
	}
	return nil
}

func main() {
	bootstrap, topic, group := os.Args[1], os.Args[2], os.Args[3]
	members, _ := strconv.Atoi(os.Args[4])
	count, _ := strconv.Atoi(os.Args[5])
	config := sarama.NewConfig()
	config.Version = sarama.V2_1_0_0
	config.Consumer.Offsets.Initial = sarama.OffsetOldest
	config.Consumer.Group.Session.Timeout = 10 * time.Second
	config.Consumer.Group.Heartbeat.Interval = 500 * time.Millisecond
	config.Consumer.Return.Errors = false

	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	var mu sync.Mutex
	total := 0
	seen := make([][]string, members)
	var wg sync.WaitGroup
	for m := 0; m < members; m++ {
		client, err := sarama.NewConsumerGroup([]string{bootstrap}, group, config)
		fail(err)
		wg.Add(1)
		go func(m int, client sarama.ConsumerGroup) {
			defer wg.Done()
			h := &handler{member: m, mu: &mu, seen: seen, total: &total, count: count, cancel: cancel}
			for ctx.Err() == nil {
				if err := client.Consume(ctx, []string{topic}, h); err != nil && ctx.Err() == nil {
					fmt.Fprintln(os.Stderr, "consume:", err)
					time.Sleep(200 * time.Millisecond)
				}
			}
			client.Close()
		}(m, client)
	}
	wg.Wait()
	out, _ := json.Marshal(map[string]interface{}{"seen": seen, "total": total})
	fmt.Println(string(out))
}

func fail(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
