// Which producer configs the installed Java client refuses to construct: for each argument
// (a config as key=value pairs joined by ';'), prints "created" or "refused: <message>".
// No broker is needed: KafkaProducer validates its configuration in its constructor.
// Run by tests/lint/test_startup_rejections.py in Java's source-file mode on .cache/kafka/libs.
import java.time.Duration;
import java.util.Properties;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.common.serialization.ByteArraySerializer;

public class ProducerStarts {
    public static void main(String[] args) {
        for (String config : args) {
            Properties props = new Properties();
            props.put("bootstrap.servers", "127.0.0.1:1");
            props.put("key.serializer", ByteArraySerializer.class.getName());
            props.put("value.serializer", ByteArraySerializer.class.getName());
            for (String pair : config.split(";")) {
                if (!pair.isEmpty()) {
                    String[] kv = pair.split("=", 2);
                    props.put(kv[0], kv[1]);
                }
            }
            try {
                KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(props);
                System.out.println("producer-starts: created");
                producer.close(Duration.ZERO);
            } catch (Exception e) {
                Throwable cause = e;
                while (cause.getCause() != null) {
                    cause = cause.getCause();
                }
                System.out.println("producer-starts: refused: " + cause.getMessage().replace('\n', ' '));
            }
        }
    }
}
