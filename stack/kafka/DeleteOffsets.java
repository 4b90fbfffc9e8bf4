// Deletes a consumer group's committed offsets of some partitions of a topic: the request
// kafka-consumer-groups.sh --delete-offsets sends (OffsetDelete), which confluent-kafka's
// admin client does not offer. The broker refuses while a member of the group is subscribed to
// the topic (one killed -9 stays until its session times out): asked again for up to 60 s.
// Run by stack.sh in Java's source-file mode on the broker's own kafka-clients jar:
//   stack.sh delete-offsets GROUP TOPIC PARTITION[,PARTITION...]
import java.util.Arrays;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.ExecutionException;
import java.util.stream.Collectors;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.common.TopicPartition;

public class DeleteOffsets {
    public static void main(String[] args) throws Exception {
        if (args.length != 4) {
            System.err.println("usage: DeleteOffsets BOOTSTRAP GROUP TOPIC PARTITION[,PARTITION...]");
            System.exit(2);
        }
        String group = args[1];
        Set<TopicPartition> partitions = Arrays.stream(args[3].split(","))
            .map(p -> new TopicPartition(args[2], Integer.parseInt(p)))
            .collect(Collectors.toSet());
        long deadline = System.currentTimeMillis() + 60_000;
        try (Admin admin = Admin.create(Map.of("bootstrap.servers", args[0]))) {
            while (true) {
                try {
                    admin.deleteConsumerGroupOffsets(group, partitions).all().get();
                    System.out.println("deleted the offsets of group " + group + " on " + partitions);
                    return;
                } catch (ExecutionException e) {
                    if (System.currentTimeMillis() > deadline) {
                        System.err.println("deleting the offsets of group " + group + " on " + partitions + " failed: "
                            + e.getCause().getMessage());
                        System.exit(1);
                    }
                    Thread.sleep(1000);
                }
            }
        }
    }
}
