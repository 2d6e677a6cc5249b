//! The `transpose` array->array codec. With `order = p`, encoded axis `i` is array
//! axis `p[i]`: the encoded chunk has shape `shape[p[i]]`, and the element at
//! encoded index `e` is the array element whose index along axis `p[i]` is `e[i]`.
//! Decoding scatters each encoded element back to its C-order array position.

use serde_json::Value;

use super::CodecError;
use crate::zarr::metadata::Codec;

fn invalid(reason: impl Into<String>) -> CodecError {
    CodecError::InvalidConfiguration { codec: "transpose".into(), reason: reason.into() }
}

/// The `order` list. Whether it is a permutation of the chunk's axes is checked
/// against the rank by [`encoded_shape`].
pub(crate) fn parse_order(c: &Codec) -> Result<Vec<usize>, CodecError> {
    let Some(Value::Array(items)) = c.configuration.get("order") else {
        return Err(invalid("`order` must be a list of axes"));
    };
    items
        .iter()
        .map(|v| {
            v.as_u64()
                .and_then(|x| usize::try_from(x).ok())
                .ok_or_else(|| invalid("`order` entries must be non-negative integers"))
        })
        .collect()
}

/// The shape of the encoded (transposed) chunk, checking `order` is a
/// permutation of `0..shape.len()`.
pub(super) fn encoded_shape(shape: &[u64], order: &[usize]) -> Result<Vec<u64>, CodecError> {
    if order.len() != shape.len() {
        return Err(invalid(format!(
            "`order` has {} axes but the chunk has {}",
            order.len(),
            shape.len()
        )));
    }
    let mut seen = vec![false; order.len()];
    for &axis in order {
        match seen.get_mut(axis) {
            Some(s) if !*s => *s = true,
            _ => return Err(invalid("`order` is not a permutation of the axes")),
        }
    }
    Ok(order.iter().map(|&a| shape[a]).collect())
}

/// Undo a transpose: `data` is the encoded chunk (axes in `order`), `shape` the
/// decoded chunk's shape (the array's axes). Returns C order of `shape`.
pub(super) fn decode(
    data: &[u8],
    itemsize: usize,
    shape: &[u64],
    order: &[usize],
) -> Result<Vec<u8>, CodecError> {
    let eshape = encoded_shape(shape, order)?;
    let n = shape
        .iter()
        .try_fold(1u64, |acc, &d| acc.checked_mul(d))
        .and_then(|n| n.checked_mul(itemsize as u64));
    if n != Some(data.len() as u64) {
        return Err(CodecError::WrongSize {
            codec: "transpose",
            expected: n.unwrap_or(u64::MAX),
            actual: data.len() as u64,
        });
    }
    if data.is_empty() || itemsize == 0 {
        return Ok(data.to_vec());
    }
    // Every dimension and product below fits in usize: their product is data.len().
    let rank = shape.len();
    let mut astride = vec![itemsize; rank];
    for j in (0..rank.saturating_sub(1)).rev() {
        astride[j] = astride[j + 1] * shape[j + 1] as usize;
    }
    // Destination byte stride of each encoded axis.
    let dstride: Vec<usize> = order.iter().map(|&a| astride[a]).collect();
    let edims: Vec<usize> = eshape.iter().map(|&d| d as usize).collect();

    let mut out = vec![0u8; data.len()];
    let mut idx = vec![0usize; rank];
    let mut dst = 0usize;
    for src in data.chunks_exact(itemsize) {
        out[dst..dst + itemsize].copy_from_slice(src);
        // Odometer over the encoded index in C order, tracking the destination.
        for i in (0..rank).rev() {
            idx[i] += 1;
            dst += dstride[i];
            if idx[i] < edims[i] {
                break;
            }
            dst -= dstride[i] * edims[i];
            idx[i] = 0;
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn hand_example_2x3() {
        // Array (2,3) = [[0,1,2],[3,4,5]]; order [1,0] stores the (3,2) array
        // [[0,3],[1,4],[2,5]].
        let enc = [0u8, 3, 1, 4, 2, 5];
        assert_eq!(decode(&enc, 1, &[2, 3], &[1, 0]).unwrap(), [0, 1, 2, 3, 4, 5]);
        assert_eq!(encoded_shape(&[2, 3], &[1, 0]).unwrap(), [3, 2]);
        // Identity.
        assert_eq!(decode(&enc, 1, &[2, 3], &[0, 1]).unwrap(), enc);
        // Itemsize 2 keeps element bytes together.
        let enc2: Vec<u8> = enc.iter().flat_map(|&v| [v, 0x10 + v]).collect();
        let want: Vec<u8> = (0..6u8).flat_map(|v| [v, 0x10 + v]).collect();
        assert_eq!(decode(&enc2, 2, &[2, 3], &[1, 0]).unwrap(), want);
    }

    #[test]
    fn hand_example_3d_non_involution() {
        // Array shape (2,3,4), element value = C index. order [2,0,1] encodes
        // axes (a2,a0,a1), shape (4,2,3): encoded[k][i][j] = a[i][j][k].
        let shape = [2u64, 3, 4];
        let order = [2usize, 0, 1];
        assert_eq!(encoded_shape(&shape, &order).unwrap(), [4, 2, 3]);
        let mut enc = Vec::new();
        for k in 0..4u8 {
            for i in 0..2u8 {
                for j in 0..3u8 {
                    enc.push(i * 12 + j * 4 + k);
                }
            }
        }
        let want: Vec<u8> = (0..24).collect();
        assert_eq!(decode(&enc, 1, &shape, &order).unwrap(), want);
        // The inverse permutation [1,2,0] is a different layout and must not match.
        assert_ne!(decode(&enc, 1, &shape, &[1, 2, 0]).unwrap(), want);
    }

    #[test]
    fn rank_zero_and_one() {
        assert_eq!(decode(&[7, 8], 2, &[], &[]).unwrap(), [7, 8]);
        assert_eq!(decode(&[1, 2, 3], 1, &[3], &[0]).unwrap(), [1, 2, 3]);
    }

    #[test]
    fn bad_orders_and_sizes() {
        for order in [vec![0], vec![0, 0], vec![1, 2], vec![0, 1, 2]] {
            assert!(encoded_shape(&[2, 3], &order).is_err(), "{order:?}");
        }
        assert!(matches!(decode(&[0; 5], 1, &[2, 3], &[1, 0]), Err(CodecError::WrongSize { .. })));
        let c = |v: Value| Codec {
            name: "transpose".into(),
            configuration: v.as_object().unwrap().clone(),
        };
        assert_eq!(parse_order(&c(json!({"order": [1, 0]}))).unwrap(), [1, 0]);
        assert!(parse_order(&c(json!({}))).is_err());
        assert!(parse_order(&c(json!({"order": "F"}))).is_err());
        assert!(parse_order(&c(json!({"order": [-1, 0]}))).is_err());
    }
}
