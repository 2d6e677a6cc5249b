//! The `bytes` array->bytes codec: elements serialised in C order with a fixed
//! endianness. Decoding to little-endian is a per-element byte swap for `big`.

use serde_json::Value;

use super::CodecError;
use crate::zarr::data_type::DataType;
use crate::zarr::metadata::Codec;

/// The codec's `endian`, as "is big-endian". Itemsize-1 types need none (and any
/// given value is irrelevant); wider types must say `little` or `big`.
pub(super) fn parse_big_endian(c: &Codec, data_type: &DataType) -> Result<bool, CodecError> {
    let invalid = |reason: &str| CodecError::InvalidConfiguration {
        codec: "bytes".into(),
        reason: reason.into(),
    };
    match c.configuration.get("endian") {
        Some(Value::String(s)) if s == "little" => Ok(false),
        Some(Value::String(s)) if s == "big" => Ok(data_type.itemsize > 1),
        None | Some(Value::Null) if data_type.itemsize == 1 => Ok(false),
        None | Some(Value::Null) => Err(invalid("`endian` is required for multi-byte types")),
        Some(_) => Err(invalid("`endian` must be \"little\" or \"big\"")),
    }
}

/// Reverse the bytes of every `unit`-byte group (a trailing partial group, which a
/// size-checked caller never passes, is left alone).
pub(super) fn swap_in_place(data: &mut [u8], unit: usize) {
    if unit > 1 {
        for group in data.chunks_exact_mut(unit) {
            group.reverse();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn codec(cfg: Value) -> Codec {
        Codec { name: "bytes".into(), configuration: cfg.as_object().unwrap().clone() }
    }

    #[test]
    fn endian_config() {
        let i4 = DataType::from_name("int32").unwrap();
        let u1 = DataType::from_name("uint8").unwrap();
        assert!(!parse_big_endian(&codec(json!({"endian": "little"})), &i4).unwrap());
        assert!(parse_big_endian(&codec(json!({"endian": "big"})), &i4).unwrap());
        // Itemsize 1: endian ignored or optional.
        assert!(!parse_big_endian(&codec(json!({"endian": "big"})), &u1).unwrap());
        assert!(!parse_big_endian(&codec(json!({})), &u1).unwrap());
        assert!(parse_big_endian(&codec(json!({})), &i4).is_err());
        assert!(parse_big_endian(&codec(json!({"endian": "middle"})), &i4).is_err());
        assert!(parse_big_endian(&codec(json!({"endian": 1})), &u1).is_err());
    }

    #[test]
    fn swap_widths() {
        let mut d: Vec<u8> = [0x0102u16, 0xa0b0].iter().flat_map(|v| v.to_be_bytes()).collect();
        swap_in_place(&mut d, 2);
        assert_eq!(d, [0x02, 0x01, 0xb0, 0xa0]);

        let vals = [0x01020304u32, 0xdeadbeef];
        let mut d: Vec<u8> = vals.iter().flat_map(|v| v.to_be_bytes()).collect();
        swap_in_place(&mut d, 4);
        assert_eq!(d, vals.iter().flat_map(|v| v.to_le_bytes()).collect::<Vec<u8>>());

        let vals = [1.5f64, -2.25e300];
        let mut d: Vec<u8> = vals.iter().flat_map(|v| v.to_be_bytes()).collect();
        swap_in_place(&mut d, 8);
        assert_eq!(d, vals.iter().flat_map(|v| v.to_le_bytes()).collect::<Vec<u8>>());

        let mut d = vec![1u8, 2, 3];
        swap_in_place(&mut d, 1);
        assert_eq!(d, [1, 2, 3]);
    }
}
