// Which consumer configs the installed Java client refuses to construct: for each argument
// (a config as key=value pairs joined by ';'), prints "created" or "refused: <message>".
// No broker is needed: KafkaConsumer validates its configuration in its constructor.
// Run by tests/lint/test_startup_rejections.py in Java's source-file mode on .cache/kafka/libs.
import java.time.Duration;
import java.util.Properties;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;

public class ConsumerStarts {
    public static void main(String[] args) {
        for (String config : args) {
            Properties props = new Properties();
            props.put("bootstrap.servers", "127.0.0.1:1");
            props.put("key.deserializer", ByteArrayDeserializer.class.getName());
            props.put("value.deserializer", ByteArrayDeserializer.class.getName());
            for (String pair : config.split(";")) {
                if (!pair.isEmpty()) {
                    String[] kv = pair.split("=", 2);
                    props.put(kv[0], kv[1]);
                }
            }
            try {
                KafkaConsumer<byte[], byte[]> consumer = new KafkaConsumer<>(props);
                System.out.println("consumer-starts: created");
                // without a broker, a consumer-protocol consumer of 3.x waits out close()'s 30 s
                consumer.close(Duration.ZERO);
            } catch (Exception e) {
                Throwable cause = e;
                while (cause.getCause() != null) {
                    cause = cause.getCause();
                }
                System.out.println("consumer-starts: refused: " + cause.getMessage().replace('\n', ' '));
            }
        }
    }
}
