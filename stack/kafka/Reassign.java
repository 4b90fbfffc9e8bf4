// Moves one partition to the given replicas (the first one preferred as leader) and waits until
// the reassignment is complete. The lab and the tests use it to shape a partition's replica set
// before a fault, e.g. an offsets partition with two replicas, so that fencing one leaves the
// other leading below min.insync.replicas (its high watermark then cannot advance).
// Run by stack.sh in Java's source-file mode on the broker's own kafka-clients jar:
//   stack.sh reassign TOPIC PARTITION BROKER[,BROKER...]
import java.util.Arrays;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.concurrent.ExecutionException;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.NewPartitionReassignment;
import org.apache.kafka.clients.admin.TopicDescription;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.TopicPartitionInfo;

public class Reassign {
    public static void main(String[] args) throws Exception {
        try {
            reassign(args);
        } catch (ExecutionException e) {
            System.err.println("reassigning " + String.join(" ", args) + " failed: " + e.getCause().getMessage());
            System.exit(1);
        }
    }

    private static void reassign(String[] args) throws Exception {
        if (args.length != 4) {
            System.err.println("usage: Reassign BOOTSTRAP TOPIC PARTITION BROKER[,BROKER...]");
            System.exit(2);
        }
        String topic = args[1];
        int partition = Integer.parseInt(args[2]);
        List<Integer> replicas = Arrays.stream(args[3].split(",")).map(Integer::valueOf).toList();
        try (Admin admin = Admin.create(Map.of("bootstrap.servers", args[0]))) {
            TopicPartition tp = new TopicPartition(topic, partition);
            admin.alterPartitionReassignments(Map.of(tp, Optional.of(new NewPartitionReassignment(replicas))))
                .all().get();
            long deadline = System.currentTimeMillis() + 60_000;
            while (true) {
                boolean moving = admin.listPartitionReassignments().reassignments().get().containsKey(tp);
                TopicDescription description = admin.describeTopics(List.of(topic)).allTopicNames().get().get(topic);
                TopicPartitionInfo info = description.partitions().get(partition);
                List<Integer> now = info.replicas().stream().map(n -> n.id()).toList();
                List<Integer> isr = info.isr().stream().map(n -> n.id()).toList();
                if (!moving && now.equals(replicas) && isr.containsAll(replicas)) {
                    System.out.println(topic + "/" + partition + " replicas " + now + " isr " + isr);
                    return;
                }
                if (System.currentTimeMillis() > deadline) {
                    System.err.println(topic + "/" + partition + " still moving after 60 s: replicas " + now + " isr " + isr);
                    System.exit(1);
                }
                Thread.sleep(200);
            }
        }
    }
}
