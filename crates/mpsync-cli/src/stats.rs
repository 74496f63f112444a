//! Statistics of trials: the papers' "mean of the median 5 of 7" and friends.

/// Mean of the middle `n - 2` values after sorting (all of them when `n <= 2`):
/// with 7 trials, the mean of the median 5 (Hart 2005 §5.1). `None` for no values.
pub fn trimmed_mean(xs: &[f64]) -> Option<f64> {
    if xs.is_empty() {
        return None;
    }
    let mut v: Vec<f64> = xs.iter().copied().filter(|x| x.is_finite()).collect();
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let keep = if v.len() <= 2 { v.len() } else { v.len() - 2 };
    let skip = (v.len() - keep) / 2;
    let mid = &v[skip..skip + keep];
    Some(mid.iter().sum::<f64>() / mid.len() as f64)
}

/// The `p`-quantile (0..=1) by nearest rank; `None` for no values.
pub fn quantile<T: Copy + PartialOrd>(xs: &[T], p: f64) -> Option<T> {
    if xs.is_empty() {
        return None;
    }
    let mut v = xs.to_vec();
    v.sort_by(|a, b| a.partial_cmp(b).unwrap_or(std::cmp::Ordering::Equal));
    let i = ((v.len() - 1) as f64 * p.clamp(0.0, 1.0)).round() as usize;
    Some(v[i])
}

/// Median.
pub fn median<T: Copy + PartialOrd>(xs: &[T]) -> Option<T> {
    quantile(xs, 0.5)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mean_of_median_five_of_seven() {
        let xs = [100.0, 1.0, 2.0, 3.0, 4.0, 5.0, -50.0];
        assert_eq!(trimmed_mean(&xs), Some(3.0));
        assert_eq!(trimmed_mean(&[4.0]), Some(4.0));
        assert_eq!(trimmed_mean(&[1.0, 3.0]), Some(2.0));
        assert_eq!(trimmed_mean(&[1.0, 2.0, 9.0]), Some(2.0));
        assert_eq!(trimmed_mean(&[]), None);
    }

    #[test]
    fn quantiles() {
        let xs = [5u64, 1, 3, 2, 4];
        assert_eq!(median(&xs), Some(3));
        assert_eq!(quantile(&xs, 0.0), Some(1));
        assert_eq!(quantile(&xs, 1.0), Some(5));
        assert_eq!(median::<u64>(&[]), None);
    }
}
