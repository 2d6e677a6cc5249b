//! The `Content-Type` of a file, from its name: Zarr's JSON documents as JSON, the flat
//! view's `.npy` and `.tif` files as theirs, chunks (and anything else) as bytes.

/// The media type of a file named `name`.
pub fn content_type(name: &str) -> &'static str {
    let lower = name.to_ascii_lowercase();
    match lower.as_str() {
        "zarr.json" | ".zarray" | ".zgroup" | ".zattrs" | ".zmetadata" => "application/json",
        n if n.ends_with(".json") => "application/json",
        n if n.ends_with(".tif") || n.ends_with(".tiff") => "image/tiff",
        n if n.ends_with(".npy") => "application/x-npy",
        _ => "application/octet-stream",
    }
}

#[cfg(test)]
mod tests {
    use super::content_type;

    #[test]
    fn types_by_name() {
        for json in ["zarr.json", ".zarray", ".zgroup", ".zattrs", ".zmetadata", "refs.json"] {
            assert_eq!(content_type(json), "application/json", "{json}");
        }
        assert_eq!(content_type("image.ome.tif"), "image/tiff");
        assert_eq!(content_type("a.TIFF"), "image/tiff");
        assert_eq!(content_type("temperature.npy"), "application/x-npy");
        for bytes in ["0", "c", "0.0.1", "json", "zarr.json.partial"] {
            assert_eq!(content_type(bytes), "application/octet-stream", "{bytes}");
        }
    }
}
