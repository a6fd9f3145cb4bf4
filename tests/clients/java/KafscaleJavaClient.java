// The Java client (kafka-clients 4.3) against a gateway, one scenario per command; prints
// key=value lines for tests/e2e/test_java_client.py to check. Exit 1 with the error otherwise.
import java.io.FileReader;
import java.time.Duration;
import java.util.*;
import java.util.concurrent.TimeUnit;
import org.apache.kafka.clients.admin.*;
import org.apache.kafka.clients.consumer.*;
import org.apache.kafka.clients.producer.*;
import org.apache.kafka.common.*;
import org.apache.kafka.common.serialization.*;

public class KafscaleJavaClient {
    static Properties base(String bootstrap, String propsFile) throws Exception {
        Properties props = new Properties();
        props.put("bootstrap.servers", bootstrap);
        if (!propsFile.isEmpty()) {
            try (FileReader reader = new FileReader(propsFile)) { props.load(reader); }
        }
        return props;
    }

    public static void main(String[] args) throws Exception {
        String command = args[0], bootstrap = args[1], propsFile = args[2];
        Properties props = base(bootstrap, propsFile);
        switch (command) {
            case "admin" -> admin(props, args[3]);
            case "produce" -> produce(props, args[3], Integer.parseInt(args[4]), args[5], args[6]);
            case "consume" -> consume(props, args[3], args[4], Integer.parseInt(args[5]), args[6], args[7]);
            case "remove-static" -> removeStatic(props, args[3], args[4]);
            case "consumer-protocol" -> consumerProtocol(props, args[3], args[4], Integer.parseInt(args[5]));
            case "transactions" -> transactions(props, args[3], args[4], Integer.parseInt(args[5]));
            case "consumer-matrix" -> consumerMatrix(props, args[3], args[4]);
            case "share" -> share(props, args[3], args[4], Integer.parseInt(args[5]));
            default -> throw new IllegalArgumentException("unknown command " + command);
        }
    }

    static void admin(Properties props, String topic) throws Exception {
        try (Admin admin = Admin.create(props)) {
            admin.createTopics(List.of(new NewTopic(topic, 3, (short) 1)
                    .configs(Map.of("cleanup.policy", "compact", "retention.ms", "86400000")))).all().get(30, TimeUnit.SECONDS);
            System.out.println("cluster_nodes=" + admin.describeCluster().nodes().get().size());
            System.out.println("listed=" + new TreeSet<>(admin.listTopics().names().get()));
            System.out.println("listed_internal=" + new TreeSet<>(admin.listTopics(new ListTopicsOptions().listInternal(true)).names().get()));
            TopicDescription byName = admin.describeTopics(List.of(topic)).allTopicNames().get().get(topic);
            Uuid id = byName.topicId();
            System.out.println("partitions=" + byName.partitions().size());
            TopicDescription byId = admin.describeTopics(TopicCollection.ofTopicIds(List.of(id))).allTopicIds().get().get(id);
            System.out.println("by_id_name=" + byId.name());
            var resource = new org.apache.kafka.common.config.ConfigResource(
                    org.apache.kafka.common.config.ConfigResource.Type.TOPIC, topic);
            admin.incrementalAlterConfigs(Map.of(resource, List.of(new AlterConfigOp(
                    new org.apache.kafka.clients.admin.ConfigEntry("retention.ms", "3600000"), AlterConfigOp.OpType.SET))))
                    .all().get(30, TimeUnit.SECONDS);
            Config config = admin.describeConfigs(List.of(resource)).all().get().get(resource);
            System.out.println("retention_ms=" + config.get("retention.ms").value());
            System.out.println("cleanup_policy=" + config.get("cleanup.policy").value());
            admin.createPartitions(Map.of(topic, NewPartitions.increaseTo(4))).all().get(30, TimeUnit.SECONDS);
            System.out.println("partitions_after=" + admin.describeTopics(List.of(topic)).allTopicNames().get().get(topic).partitions().size());
            admin.deleteTopics(List.of(topic)).all().get(30, TimeUnit.SECONDS);
            System.out.println("deleted=" + !admin.listTopics().names().get().contains(topic));
        }
    }

    static void produce(Properties props, String topic, int count, String mode, String codec) throws Exception {
        props.put("key.serializer", StringSerializer.class.getName());
        props.put("value.serializer", StringSerializer.class.getName());
        props.put("compression.type", codec);
        props.put("enable.idempotence", "true");
        props.put("acks", "all");
        boolean transactional = mode.startsWith("transactional");
        if (transactional) props.put("transactional.id", "java-" + topic);
        try (Producer<String, String> producer = new KafkaProducer<>(props)) {
            if (transactional) { producer.initTransactions(); producer.beginTransaction(); }
            List<java.util.concurrent.Future<RecordMetadata>> sent = new ArrayList<>();
            for (int i = 0; i < count; i++) {
                sent.add(producer.send(new ProducerRecord<>(topic, "k" + i, mode + "-" + i)));
            }
            if (mode.equals("transactional-abort")) {
                producer.flush();
                producer.abortTransaction();
            } else if (transactional) {
                producer.commitTransaction();
            }
            long last = -1;
            for (var future : sent) last = Math.max(last, future.get().offset());
            System.out.println("sent=" + sent.size());
            System.out.println("last_offset=" + last);
        }
    }

    static void consume(Properties props, String topic, String group, int expected, String isolation, String instance)
            throws Exception {
        props.put("group.id", group);
        props.put("key.deserializer", StringDeserializer.class.getName());
        props.put("value.deserializer", StringDeserializer.class.getName());
        props.put("auto.offset.reset", "earliest");
        props.put("enable.auto.commit", "false");
        props.put("isolation.level", isolation);
        if (!instance.equals("-")) props.put("group.instance.id", instance);
        List<String> values = new ArrayList<>();
        try (Consumer<String, String> consumer = new KafkaConsumer<>(props)) {
            consumer.subscribe(List.of(topic));
            long deadline = System.currentTimeMillis() + 60_000;
            while (values.size() < expected && System.currentTimeMillis() < deadline) {
                for (ConsumerRecord<String, String> record : consumer.poll(Duration.ofMillis(500))) {
                    values.add(record.value());
                }
            }
            consumer.commitSync();
            // A short extra poll: nothing more arrives (aborted records never do).
            for (ConsumerRecord<String, String> record : consumer.poll(Duration.ofSeconds(2))) values.add(record.value());
            consumer.commitSync();
            System.out.println("assigned=" + consumer.assignment().size());
        }
        System.out.println("count=" + values.size());
        System.out.println("aborted_seen=" + values.stream().filter(v -> v.startsWith("transactional-abort")).count());
        System.out.println("first=" + (values.isEmpty() ? "" : values.get(0)));
    }

    /** KIP-848: a consumer with group.protocol=consumer, described by the admin while it is a member. */
    static void consumerProtocol(Properties props, String topic, String group, int expected) throws Exception {
        Properties admin_props = (Properties) props.clone();
        int count = 0;
        try (Admin admin = Admin.create(admin_props)) {  // a group config, set before the group exists
            var resource = new org.apache.kafka.common.config.ConfigResource(
                    org.apache.kafka.common.config.ConfigResource.Type.GROUP, group);
            admin.incrementalAlterConfigs(Map.of(resource, List.of(new AlterConfigOp(
                    new ConfigEntry("consumer.heartbeat.interval.ms", "1000"), AlterConfigOp.OpType.SET))))
                    .all().get(30, TimeUnit.SECONDS);
            ConfigEntry entry = admin.describeConfigs(List.of(resource)).all().get().get(resource)
                    .get("consumer.heartbeat.interval.ms");
            System.out.println("group_heartbeat_interval=" + entry.value() + "/" + entry.source());
        }
        try (Consumer<String, String> consumer = modernConsumer(props, group, null); Admin admin = Admin.create(admin_props)) {
            consumer.subscribe(List.of(topic));
            long deadline = System.currentTimeMillis() + 60_000;
            while (count < expected && System.currentTimeMillis() < deadline) {
                count += consumer.poll(Duration.ofMillis(500)).count();
                consumer.commitSync();
            }
            ConsumerGroupDescription described = admin.describeConsumerGroups(List.of(group)).all().get().get(group);
            System.out.println("group_type=" + described.type());
            System.out.println("state=" + described.groupState());
            System.out.println("members=" + described.members().size());
            System.out.println("member_partitions=" + described.members().iterator().next().assignment().topicPartitions().size());
            System.out.println("assigned=" + consumer.assignment().size());
        }
        System.out.println("count=" + count);
        try (Admin admin = Admin.create(admin_props)) {
            var offsets = admin.listConsumerGroupOffsets(group).partitionsToOffsetAndMetadata().get();
            System.out.println("committed_total=" + offsets.values().stream().mapToLong(OffsetAndMetadata::offset).sum());
        }
    }

    static void removeStatic(Properties props, String group, String instance) throws Exception {
        try (Admin admin = Admin.create(props)) {
            var options = new RemoveMembersFromConsumerGroupOptions(List.of(new MemberToRemove(instance)));
            admin.removeMembersFromConsumerGroup(group, options).all().get(30, TimeUnit.SECONDS);
            System.out.println("removed=" + instance);
            var offsets = admin.listConsumerGroupOffsets(group).partitionsToOffsetAndMetadata().get();
            long total = offsets.values().stream().mapToLong(OffsetAndMetadata::offset).sum();
            System.out.println("committed_total=" + total);
            ConsumerGroupDescription described = admin.describeConsumerGroups(List.of(group)).all().get().get(group);
            System.out.println("members_left=" + described.members().size());
        }
    }

    /** One transactional producer through several transactions (every third aborted), each with
     *  its records and a group's offset; the partition's producer epoch after each, as the admin's
     *  describeProducers sees it; then what a read_committed consumer reads and the group's offset. */
    static void transactions(Properties props, String topic, String group, int transactions) throws Exception {
        Properties admin_props = (Properties) props.clone();
        Properties consumer_props = (Properties) props.clone();
        props.put("key.serializer", StringSerializer.class.getName());
        props.put("value.serializer", StringSerializer.class.getName());
        props.put("transactional.id", "java-tx-" + topic);
        TopicPartition partition = new TopicPartition(topic, 0);
        List<Integer> epochs = new ArrayList<>();
        int committed = 0;
        try (Producer<String, String> producer = new KafkaProducer<>(props); Admin admin = Admin.create(admin_props)) {
            admin.createTopics(List.of(new NewTopic(topic, 1, (short) 1))).all().get(30, TimeUnit.SECONDS);
            producer.initTransactions();
            for (int i = 0; i < transactions; i++) {
                boolean abort = i % 3 == 2;
                producer.beginTransaction();
                for (int j = 0; j < 5; j++) producer.send(new ProducerRecord<>(topic, "k" + j, (abort ? "aborted-" : "committed-") + i + "-" + j));
                producer.sendOffsetsToTransaction(Map.of(new TopicPartition("source", 0), new OffsetAndMetadata(i + 1)),
                        new ConsumerGroupMetadata(group));
                if (abort) { producer.flush(); producer.abortTransaction(); } else { producer.commitTransaction(); committed++; }
                var described = admin.describeProducers(List.of(partition)).partitionResult(partition).get(30, TimeUnit.SECONDS);
                epochs.add(described.activeProducers().stream().mapToInt(ProducerState::producerEpoch).max().orElse(-1));
            }
            var offsets = admin.listConsumerGroupOffsets(group).partitionsToOffsetAndMetadata().get();
            OffsetAndMetadata source = offsets.get(new TopicPartition("source", 0));
            System.out.println("group_offset=" + (source == null ? -1 : source.offset()));
        }
        System.out.println("epochs=" + epochs);
        consumer_props.put("key.deserializer", StringDeserializer.class.getName());
        consumer_props.put("value.deserializer", StringDeserializer.class.getName());
        consumer_props.put("isolation.level", "read_committed");
        List<String> values = new ArrayList<>();
        try (Consumer<String, String> consumer = new KafkaConsumer<>(consumer_props)) {
            consumer.assign(List.of(partition));
            consumer.seekToBeginning(List.of(partition));
            long deadline = System.currentTimeMillis() + 20_000;
            while (values.size() < committed * 5 && System.currentTimeMillis() < deadline) {
                for (ConsumerRecord<String, String> record : consumer.poll(Duration.ofMillis(500))) values.add(record.value());
            }
            for (ConsumerRecord<String, String> record : consumer.poll(Duration.ofSeconds(1))) values.add(record.value());
        }
        System.out.println("read=" + values.size());
        System.out.println("aborted_seen=" + values.stream().filter(v -> v.startsWith("aborted")).count());
    }

    static KafkaConsumer<String, String> modernConsumer(Properties base, String group, String instance) {
        Properties props = (Properties) base.clone();
        props.put("group.id", group);
        props.put("group.protocol", "consumer");
        props.put("key.deserializer", StringDeserializer.class.getName());
        props.put("value.deserializer", StringDeserializer.class.getName());
        props.put("auto.offset.reset", "earliest");
        props.put("enable.auto.commit", "false");
        if (instance != null) props.put("group.instance.id", instance);
        return new KafkaConsumer<>(props);
    }

    /** Polls every consumer (committing what each read) until done says so or 60 s pass. */
    static void pollAll(List<KafkaConsumer<String, String>> consumers, List<String> values,
                        java.util.function.BooleanSupplier done) {
        long deadline = System.currentTimeMillis() + 60_000;
        while (!done.getAsBoolean() && System.currentTimeMillis() < deadline) {
            for (KafkaConsumer<String, String> consumer : consumers) {
                for (ConsumerRecord<String, String> record : consumer.poll(Duration.ofMillis(100))) values.add(record.value());
                consumer.commitSync();
            }
        }
    }

    /** KIP-848 with the reference client through the group scenarios: 3 members over 6
     *  partitions, a member leaving, a static member coming back to its partitions, and a
     *  server-side regex (SubscriptionPattern) picking up a topic created later. */
    static void consumerMatrix(Properties props, String topic, String group) throws Exception {
        Properties producer_props = (Properties) props.clone();
        producer_props.put("key.serializer", StringSerializer.class.getName());
        producer_props.put("value.serializer", StringSerializer.class.getName());
        try (Admin admin = Admin.create(props); Producer<String, String> producer = new KafkaProducer<>(producer_props)) {
            admin.createTopics(List.of(new NewTopic(topic, 6, (short) 1))).all().get(30, TimeUnit.SECONDS);
            for (int i = 0; i < 600; i++) producer.send(new ProducerRecord<>(topic, i % 6, null, "v" + i));
            producer.flush();
            List<KafkaConsumer<String, String>> members = new ArrayList<>();
            for (int i = 0; i < 3; i++) {
                KafkaConsumer<String, String> consumer = modernConsumer(props, group, i == 0 ? "static-0" : null);
                consumer.subscribe(List.of(topic));
                members.add(consumer);
            }
            List<String> values = new ArrayList<>();
            pollAll(members, values, () -> values.size() >= 600 && members.stream().allMatch(c -> c.assignment().size() == 2));
            System.out.println("three_read=" + values.size() + "/" + new HashSet<>(values).size());
            System.out.println("three_split=" + members.stream().map(c -> c.assignment().size()).toList());
            Set<TopicPartition> staticOwned = new HashSet<>(members.get(0).assignment());
            members.remove(2).close();  // a member leaves: the other two take its partitions
            pollAll(members, values, () -> members.stream().mapToInt(c -> c.assignment().size()).sum() == 6);
            System.out.println("after_leave=" + members.stream().map(c -> c.assignment().size()).toList());
            staticOwned = new HashSet<>(members.get(0).assignment());
            members.remove(0).close();  // the static member leaves for now (epoch -2) ...
            KafkaConsumer<String, String> back = modernConsumer(props, group, "static-0");
            back.subscribe(List.of(topic));  // ... and comes back to its partitions
            members.add(0, back);
            pollAll(members, values, () -> back.assignment().size() > 0);
            System.out.println("static_back_same=" + back.assignment().equals(staticOwned));
            for (KafkaConsumer<String, String> consumer : members) consumer.close();

            KafkaConsumer<String, String> regex = modernConsumer(props, group + "-regex", null);
            regex.subscribe(new SubscriptionPattern(topic + "-later-.*"));
            List<String> later = new ArrayList<>();
            pollAll(List.of(regex), later, () -> true);
            admin.createTopics(List.of(new NewTopic(topic + "-later-1", 2, (short) 1))).all().get(30, TimeUnit.SECONDS);
            for (int i = 0; i < 10; i++) producer.send(new ProducerRecord<>(topic + "-later-1", "w" + i));
            producer.flush();
            pollAll(List.of(regex), later, () -> later.size() >= 10);
            System.out.println("regex_read=" + later.size());
            regex.close();
        }
    }

    // Share groups (KIP-932): explicit acknowledgement, a record released every time archived after
    // the group's delivery limit, and the admin's share-group calls.
    static void share(Properties props, String topic, String group, int expected) throws Exception {
        var resource = new org.apache.kafka.common.config.ConfigResource(
                org.apache.kafka.common.config.ConfigResource.Type.GROUP, group);
        try (Admin admin = Admin.create(props)) {
            admin.incrementalAlterConfigs(Map.of(resource, List.of(
                    new AlterConfigOp(new ConfigEntry("share.auto.offset.reset", "earliest"), AlterConfigOp.OpType.SET),
                    new AlterConfigOp(new ConfigEntry("share.delivery.count.limit", "3"), AlterConfigOp.OpType.SET))))
                    .all().get(30, TimeUnit.SECONDS);
        }
        Properties config = (Properties) props.clone();
        config.put("group.id", group);
        config.put("share.acknowledgement.mode", "explicit");
        config.put("key.deserializer", StringDeserializer.class.getName());
        config.put("value.deserializer", StringDeserializer.class.getName());
        Map<String, Integer> deliveries = new HashMap<>();
        int accepted = 0;
        try (KafkaShareConsumer<String, String> consumer = new KafkaShareConsumer<>(config);
             Admin admin = Admin.create(props)) {
            consumer.subscribe(List.of(topic));
            long deadline = System.currentTimeMillis() + 60_000;
            while (System.currentTimeMillis() < deadline
                    && (accepted < expected || deliveries.getOrDefault("poison", 0) < 3)) {
                for (ConsumerRecord<String, String> record : consumer.poll(Duration.ofMillis(500))) {
                    deliveries.merge(record.value(), 1, Integer::sum);
                    if (record.value().equals("poison")) {
                        consumer.acknowledge(record, AcknowledgeType.RELEASE);
                    } else {
                        consumer.acknowledge(record, AcknowledgeType.ACCEPT);
                        accepted++;
                    }
                }
                for (var result : consumer.commitSync().values()) {
                    if (result.isPresent()) throw result.get();
                }
            }
            consumer.poll(Duration.ofMillis(1500));  // an archived record would come back now, if it could
            ShareGroupDescription described = admin.describeShareGroups(List.of(group)).all().get().get(group);
            System.out.println("share_state=" + described.groupState());
            System.out.println("share_members=" + described.members().size());
        }
        System.out.println("accepted=" + accepted);
        System.out.println("poison_deliveries=" + deliveries.getOrDefault("poison", 0));
        System.out.println("most_deliveries_of_others=" + deliveries.entrySet().stream()
                .filter(e -> !e.getKey().equals("poison")).mapToInt(Map.Entry::getValue).max().orElse(0));
        try (Admin admin = Admin.create(props)) {
            var spec = Map.of(group, new ListShareGroupOffsetsSpec());
            var offsets = admin.listShareGroupOffsets(spec).partitionsToOffsetInfo(group).get(30, TimeUnit.SECONDS);
            System.out.println("start_offset=" + offsets.get(new TopicPartition(topic, 0)).startOffset());
            admin.alterShareGroupOffsets(group, Map.of(new TopicPartition(topic, 0), 1L)).all().get(30, TimeUnit.SECONDS);
            offsets = admin.listShareGroupOffsets(spec).partitionsToOffsetInfo(group).get(30, TimeUnit.SECONDS);
            System.out.println("start_offset_altered=" + offsets.get(new TopicPartition(topic, 0)).startOffset());
            admin.deleteShareGroups(List.of(group)).all().get(30, TimeUnit.SECONDS);
            System.out.println("deleted=" + group);
        }
    }
}
