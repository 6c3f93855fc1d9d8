// x - mean(x) per row; the mean accumulated in double.
extern "C" void center_rows_run(const float* x, float* y, long rows, long cols) {
  for (long r = 0; r < rows; ++r) {
    double acc = 0.0;
    for (long c = 0; c < cols; ++c) acc += x[r * cols + c];
    const float mean = (float)(acc / cols);
    for (long c = 0; c < cols; ++c) y[r * cols + c] = x[r * cols + c] - mean;
  }
}
