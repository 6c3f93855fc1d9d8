// Sum of each row, accumulated in double so long rows keep their precision.
extern "C" void row_sum_run(const float* x, float* y, long rows, long cols) {
  for (long r = 0; r < rows; ++r) {
    double acc = 0.0;
    for (long c = 0; c < cols; ++c) acc += x[r * cols + c];
    y[r] = (float)acc;
  }
}
