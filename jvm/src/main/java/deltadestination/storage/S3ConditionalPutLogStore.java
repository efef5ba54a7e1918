package deltadestination.storage;

import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.util.Iterator;

import io.delta.storage.S3SingleDriverLogStore;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.FSDataOutputStream;
import org.apache.hadoop.fs.FSDataOutputStreamBuilder;
import org.apache.hadoop.fs.FileSystem;
import org.apache.hadoop.fs.Options;
import org.apache.hadoop.fs.Path;
import org.apache.hadoop.fs.s3a.RemoteFileChangedException;

/**
 * A Delta log store for S3 that is safe for several writers, in several processes, using
 * the store's own put-if-absent (a PUT with {@code If-None-Match: *}) instead of DynamoDB.
 *
 * <p>Why: Delta's default log store for s3a, {@link S3SingleDriverLogStore}, writes a commit
 * file {@code _delta_log/N.json} after an exists() check under a lock that only covers its own
 * JVM; two drivers (or a driver and another engine) can both see "N.json absent" and both
 * PUT it, and the later PUT silently replaces the earlier commit. S3 (since 2024) and
 * S3-compatible stores such as SeaweedFS, MinIO and R2 answer 412 Precondition Failed to a
 * PUT with {@code If-None-Match: *} on an existing key, which decides the race on the server.
 *
 * <p>How: Hadoop 3.5's S3A sends that header when a file is created through
 * {@code createFile(path).overwrite(false).must("fs.option.create.conditional.overwrite", true)}
 * (S3AFileSystem#innerCreateFile; a plain {@code create(path, false)} only does a HEAD/LIST
 * probe), and translates the 412 into {@link RemoteFileChangedException}, which its retry
 * policy does not retry. This class turns that into {@link java.nio.file.FileAlreadyExistsException},
 * the LogStore contract on which Delta's OptimisticTransaction checks for conflicts and retries
 * at the next version. Overwrites ({@code _last_checkpoint}) and reads/listing are the parent's.
 *
 * <p>The commit's bytes are assembled in memory before the stream opens: S3A uploads on
 * close(), so a failure while producing the actions must never close (and so publish) a
 * partial commit; such a stream is aborted instead.
 *
 * <p>Enable with {@code spark.delta.logStore.s3a.impl} (and {@code .s3.impl}) =
 * {@code deltadestination.storage.S3ConditionalPutLogStore}. Needs a store that enforces
 * {@code If-None-Match: *}; with one that ignores it this is no safer than the default.
 */
public class S3ConditionalPutLogStore extends S3SingleDriverLogStore {

    public S3ConditionalPutLogStore(Configuration hadoopConf) {
        super(hadoopConf);
    }

    @Override
    public void write(
            Path path,
            Iterator<String> actions,
            Boolean overwrite,
            Configuration hadoopConf) throws IOException {
        if (overwrite) {
            super.write(path, actions, true, hadoopConf);
            return;
        }
        final ByteArrayOutputStream content = new ByteArrayOutputStream();
        while (actions.hasNext()) {
            content.write((actions.next() + "\n").getBytes(StandardCharsets.UTF_8));
        }
        final FileSystem fs = path.getFileSystem(hadoopConf);
        final Path qualified = fs.makeQualified(path);
        try {
            final FSDataOutputStreamBuilder<?, ?> builder = fs.createFile(qualified).overwrite(false);
            builder.must(Options.CreateFileOptionKeys.FS_OPTION_CREATE_CONDITIONAL_OVERWRITE, true);
            final FSDataOutputStream stream = builder.build();
            try {
                content.writeTo(stream);
            } catch (IOException | RuntimeException e) {
                stream.abort();
                throw e;
            }
            stream.close(); // the conditional PUT happens here
        } catch (RemoteFileChangedException | org.apache.hadoop.fs.FileAlreadyExistsException e) {
            // 412 from the store: another writer created this commit file first.
            java.nio.file.FileAlreadyExistsException conflict =
                new java.nio.file.FileAlreadyExistsException(qualified.toString());
            conflict.initCause(e);
            throw conflict;
        }
    }
}
