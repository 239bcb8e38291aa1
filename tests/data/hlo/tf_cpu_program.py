import tensorflow as tf


@tf.function(jit_compile=True)
def step(x, w, flag, table, idx):
    h = tf.nn.relu(tf.matmul(x, w) + 1.0)
    i, h = tf.while_loop(lambda i, v: i < 5, lambda i, v: (i + 1, tf.tanh(v) * 2.0), (0, h))
    h = tf.cond(flag, lambda: tf.exp(h), lambda: -h)
    e = tf.gather(table, idx)
    hb = tf.cast(h, tf.bfloat16)
    return tf.reduce_sum(h, axis=1), tf.reduce_mean(e), hb
print(step(tf.ones([8, 16]), tf.ones([16, 32]), tf.constant(True), tf.ones([1000, 64]), tf.constant([1, 5, 7, 9])))
@tf.function(jit_compile=True)
def conv(x, k):
    return tf.nn.relu(tf.nn.conv2d(x, k, 1, "SAME"))
print(conv(tf.ones([2, 8, 8, 3]), tf.ones([3, 3, 3, 4])).shape)
